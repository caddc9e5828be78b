/*
 * conn_limit.c - a count of open connections per client address.
 *
 * A chained hash table of 16-byte addresses (IPv4 as IPv4-mapped IPv6) with
 * their counts; a node lives while its address has a connection open, so
 * the table holds at most max_total nodes (or as many as are open when the
 * total is not limited). Buckets double when nodes outnumber them twice.
 */
#include "frontends/common/conn_limit.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"

typedef struct node {
    uint8_t addr[16];
    int n;
    struct node *next;
} node;

struct infd_conn_limit {
    pthread_mutex_t mu;
    int max_total, max_per_client;
    int open;
    node **buckets;
    size_t n_buckets; /* a power of two */
    size_t n_nodes;
};

infd_conn_limit *infd_conn_limit_create(int max_total, int max_per_client)
{
    infd_conn_limit *l = infd_calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    l->n_buckets = 256;
    l->buckets = infd_calloc(l->n_buckets, sizeof(*l->buckets));
    if (!l->buckets || pthread_mutex_init(&l->mu, NULL) != 0) {
        infd_free(l->buckets);
        infd_free(l);
        return NULL;
    }
    l->max_total = max_total > 0 ? max_total : 0;
    l->max_per_client = max_per_client > 0 ? max_per_client : 0;
    return l;
}

void infd_conn_limit_destroy(infd_conn_limit *l)
{
    if (!l)
        return;
    for (size_t b = 0; b < l->n_buckets; b++) {
        for (node *p = l->buckets[b], *next; p; p = next) {
            next = p->next;
            infd_free(p);
        }
    }
    infd_free(l->buckets);
    pthread_mutex_destroy(&l->mu);
    infd_free(l);
}

/* The client's address as 16 bytes; false for other families. */
static int key_of(const struct sockaddr *sa, uint8_t out[16])
{
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &in->sin_addr, 4);
        return 1;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return 1;
    }
    return 0;
}

/* FNV-1a over the 16 bytes. */
static size_t hash_of(const uint8_t k[16])
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 16; i++)
        h = (h ^ k[i]) * 1099511628211ull;
    return (size_t)(h ^ (h >> 29));
}

static node **slot_of(infd_conn_limit *l, const uint8_t k[16])
{
    node **pp = &l->buckets[hash_of(k) & (l->n_buckets - 1)];
    while (*pp && memcmp((*pp)->addr, k, 16) != 0)
        pp = &(*pp)->next;
    return pp;
}

/* Doubles the buckets; on no memory the chains just grow longer. */
static void grow(infd_conn_limit *l)
{
    size_t nb = l->n_buckets * 2;
    node **b = infd_calloc(nb, sizeof(*b));
    if (!b)
        return;
    for (size_t i = 0; i < l->n_buckets; i++) {
        for (node *p = l->buckets[i], *next; p; p = next) {
            next = p->next;
            node **head = &b[hash_of(p->addr) & (nb - 1)];
            p->next = *head;
            *head = p;
        }
    }
    infd_free(l->buckets);
    l->buckets = b;
    l->n_buckets = nb;
}

infd_conn_verdict infd_conn_limit_enter(infd_conn_limit *l, const struct sockaddr *peer)
{
    uint8_t k[16];
    int keyed = key_of(peer, k);
    infd_conn_verdict v = INFD_CONN_ADMITTED;
    pthread_mutex_lock(&l->mu);
    if (l->max_total && l->open >= l->max_total) {
        v = INFD_CONN_OVER_TOTAL;
    } else if (keyed) {
        node **pp = slot_of(l, k);
        if (*pp && l->max_per_client && (*pp)->n >= l->max_per_client) {
            v = INFD_CONN_OVER_PER_CLIENT;
        } else if (*pp) {
            (*pp)->n++;
        } else {
            node *p = infd_malloc(sizeof(*p));
            if (!p) {
                v = INFD_CONN_NO_MEMORY;
            } else {
                memcpy(p->addr, k, 16);
                p->n = 1;
                p->next = NULL;
                *pp = p;
                if (++l->n_nodes > 2 * l->n_buckets)
                    grow(l);
            }
        }
    }
    if (v == INFD_CONN_ADMITTED)
        l->open++;
    pthread_mutex_unlock(&l->mu);
    return v;
}

void infd_conn_limit_leave(infd_conn_limit *l, const struct sockaddr *peer)
{
    uint8_t k[16];
    int keyed = key_of(peer, k);
    pthread_mutex_lock(&l->mu);
    if (l->open > 0)
        l->open--;
    if (keyed) {
        node **pp = slot_of(l, k);
        if (*pp && --(*pp)->n <= 0) {
            node *p = *pp;
            *pp = p->next;
            infd_free(p);
            l->n_nodes--;
        }
    }
    pthread_mutex_unlock(&l->mu);
}

int infd_conn_limit_open(infd_conn_limit *l)
{
    pthread_mutex_lock(&l->mu);
    int n = l->open;
    pthread_mutex_unlock(&l->mu);
    return n;
}
