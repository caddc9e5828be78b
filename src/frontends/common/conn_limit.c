/*
 * conn_limit.c - a count of open connections per client address.
 *
 * A chained hash table of 16-byte addresses (IPv4 as IPv4-mapped IPv6); a
 * node lives while its address has a connection open, so the table holds
 * at most max_total nodes (or as many as are open when the total is not
 * limited). Buckets double when nodes outnumber them twice.
 *
 * Beside it, an array indexed by fd number holds each admitted socket's
 * record: its ticket, its inode, and its place in its address's list, so
 * that a scan at the per-client limit visits that client's connections
 * only. Scans that release nothing are rate-limited: per address at the
 * per-client limit, for the whole table at the total.
 */
#include "frontends/common/conn_limit.h"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/clock.h"

/* After a scan that released nothing, the next one waits this long. */
#define SCAN_EVERY_NS 100000000ull /* 100 ms */

typedef struct node {
    uint8_t addr[16];
    int n;               /* its open connections: the records in its list */
    int first;           /* fd number of the first record, -1: none */
    uint64_t scanned_ns; /* its last scan, and whether that released any */
    bool scan_released;
    struct node *next;
} node;

/* An admitted socket, at its fd number (ticket 0: none). */
typedef struct rec {
    uint64_t ticket;
    dev_t dev; /* the socket's identity at admission */
    ino_t ino;
    node *owner;    /* its address; NULL: counted in the total only */
    int next, prev; /* the owner's list, by fd number (-1 ends it) */
} rec;

struct infd_conn_limit {
    pthread_mutex_t mu;
    int max_total, max_per_client;
    int open;
    node **buckets;
    size_t n_buckets; /* a power of two */
    size_t n_nodes;
    rec *by_fd;
    int by_fd_cap;
    int hi; /* no record at or above this fd number */
    uint64_t next_ticket;
    uint64_t scanned_ns; /* the last scan of every record, and whether it released any */
    bool scan_released;
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
    infd_free(l->by_fd);
    pthread_mutex_destroy(&l->mu);
    infd_free(l);
}

/* The client's address as 16 bytes; false for other families. */
static bool key_of(const struct sockaddr *sa, uint8_t out[16])
{
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        memset(out, 0, 10);
        out[10] = out[11] = 0xff;
        memcpy(out + 12, &in->sin_addr, 4);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(out, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return true;
    }
    return false;
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

/* The limits' answer for one more connection from k (NULL: no address).
 * *owner is k's node, created if need be when the answer is yes (NULL when
 * there is none). */
static infd_conn_verdict ask(infd_conn_limit *l, const uint8_t *k, node **owner)
{
    *owner = NULL;
    node **pp = k ? slot_of(l, k) : NULL;
    if (pp && *pp)
        *owner = *pp;
    if (l->max_total && l->open >= l->max_total)
        return INFD_CONN_OVER_TOTAL;
    if (*owner && l->max_per_client && (*owner)->n >= l->max_per_client)
        return INFD_CONN_OVER_PER_CLIENT;
    if (pp && !*pp) {
        node *p = infd_calloc(1, sizeof(*p));
        if (!p)
            return INFD_CONN_NO_MEMORY;
        memcpy(p->addr, k, 16);
        p->first = -1;
        *pp = p;
        *owner = p;
        if (++l->n_nodes > 2 * l->n_buckets)
            grow(l);
    }
    return INFD_CONN_ADMITTED;
}

/* Gives the place of the record at fd back. */
static void release(infd_conn_limit *l, int fd)
{
    rec *r = &l->by_fd[fd];
    if (l->open > 0)
        l->open--;
    node *o = r->owner;
    if (o) {
        if (r->prev >= 0)
            l->by_fd[r->prev].next = r->next;
        else
            o->first = r->next;
        if (r->next >= 0)
            l->by_fd[r->next].prev = r->prev;
        if (--o->n <= 0) {
            node **pp = slot_of(l, o->addr);
            *pp = o->next;
            infd_free(o);
            l->n_nodes--;
        }
    }
    r->ticket = 0;
    r->owner = NULL;
}

/* True when the socket recorded at fd is closed (the number free or now
 * another file) or its client has hung up. */
static bool gone(int fd, const rec *r)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_dev != r->dev || st.st_ino != r->ino)
        return true;
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* At a limit (v): releases the connections that are gone, of k's address
 * at the per-client limit, of every address at the total, unless the last
 * such scan released nothing less than SCAN_EVERY_NS ago. True if it
 * released any. */
static bool scan(infd_conn_limit *l, infd_conn_verdict v, node *owner)
{
    uint64_t now = infd_clock_ns();
    bool any = false;
    if (v == INFD_CONN_OVER_PER_CLIENT) {
        if (!owner->scan_released && now - owner->scanned_ns < SCAN_EVERY_NS)
            return false;
        int n = owner->n;
        int released = 0;
        for (int fd = owner->first, next; fd >= 0; fd = next) {
            next = l->by_fd[fd].next;
            if (gone(fd, &l->by_fd[fd])) {
                released++;
                release(l, fd); /* frees owner with its last record */
            }
        }
        if (released < n) {
            owner->scanned_ns = now;
            owner->scan_released = released > 0;
        }
        return released > 0;
    }
    if (!l->scan_released && now - l->scanned_ns < SCAN_EVERY_NS)
        return false;
    for (int fd = 0; fd < l->hi; fd++) {
        if (l->by_fd[fd].ticket && gone(fd, &l->by_fd[fd])) {
            release(l, fd);
            any = true;
        }
    }
    l->scanned_ns = now;
    l->scan_released = any;
    return any;
}

/* Room for a record at fd; false on out of memory. */
static bool reserve(infd_conn_limit *l, int fd)
{
    if (fd < l->by_fd_cap)
        return true;
    int cap = l->by_fd_cap ? l->by_fd_cap : 64;
    while (cap <= fd)
        cap *= 2;
    rec *t = infd_realloc(l->by_fd, (size_t)cap * sizeof(*t));
    if (!t)
        return false;
    memset(t + l->by_fd_cap, 0, (size_t)(cap - l->by_fd_cap) * sizeof(*t));
    l->by_fd = t;
    l->by_fd_cap = cap;
    return true;
}

infd_conn_verdict infd_conn_limit_enter(infd_conn_limit *l, int fd, const struct sockaddr *peer,
                                        uint64_t *ticket)
{
    *ticket = 0;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return INFD_CONN_OVER_TOTAL; /* no socket to count */
    uint8_t k[16];
    const uint8_t *key = key_of(peer, k) ? k : NULL;
    infd_conn_verdict v = INFD_CONN_NO_MEMORY;
    node *owner = NULL;
    pthread_mutex_lock(&l->mu);
    if (!reserve(l, fd))
        goto out;
    if (l->by_fd[fd].ticket)
        release(l, fd); /* that socket is closed: its number was given again */
    v = ask(l, key, &owner);
    /* At most twice: the per-client scan may leave the total over. */
    for (int i = 0; i < 2 && (v == INFD_CONN_OVER_TOTAL || v == INFD_CONN_OVER_PER_CLIENT); i++) {
        if (!scan(l, v, owner))
            break;
        v = ask(l, key, &owner);
    }
    if (v != INFD_CONN_ADMITTED)
        goto out;
    rec *r = &l->by_fd[fd];
    r->ticket = *ticket = ++l->next_ticket;
    r->dev = st.st_dev;
    r->ino = st.st_ino;
    r->owner = owner;
    r->prev = -1;
    r->next = -1;
    if (owner) {
        r->next = owner->first;
        if (owner->first >= 0)
            l->by_fd[owner->first].prev = fd;
        owner->first = fd;
        owner->n++;
    }
    l->open++;
    if (fd >= l->hi)
        l->hi = fd + 1;
out:
    pthread_mutex_unlock(&l->mu);
    return v;
}

void infd_conn_limit_leave(infd_conn_limit *l, int fd, uint64_t ticket)
{
    if (!ticket || fd < 0)
        return;
    pthread_mutex_lock(&l->mu);
    if (fd < l->by_fd_cap && l->by_fd[fd].ticket == ticket)
        release(l, fd);
    pthread_mutex_unlock(&l->mu);
}

int infd_conn_limit_open(infd_conn_limit *l)
{
    pthread_mutex_lock(&l->mu);
    int n = l->open;
    pthread_mutex_unlock(&l->mu);
    return n;
}
