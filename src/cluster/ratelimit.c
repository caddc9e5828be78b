/*
 * ratelimit.c - token buckets per model and per client key (ratelimit.h).
 */
#include "cluster/ratelimit.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/common.h"

#define RL_MAX_RULES 64
#define RL_KEY_BYTES 64
#define RL_CLIENTS   4096 /* buckets of "client:*", a power of two */
#define RL_WINDOW    8    /* probe window of that table */

typedef struct rl_bucket {
    double rate, burst; /* tokens per second, the most it holds */
    double tokens;
    uint64_t last_ns; /* when tokens was right */
} rl_bucket;

typedef struct rl_rule {
    bool is_model;
    char key[RL_KEY_BYTES];
    rl_bucket b;
} rl_rule;

typedef struct rl_client {
    bool used;
    char key[RL_KEY_BYTES];
    rl_bucket b;
} rl_client;

struct cluster_ratelimit {
    pthread_mutex_t mu;
    rl_rule rules[RL_MAX_RULES];
    int n_rules;
    bool has_default; /* "client:*" */
    rl_bucket default_client;
    rl_client *clients; /* [RL_CLIENTS], made with the "client:*" rule */
};

infd_status cluster_ratelimit_create(cluster_ratelimit **out, infd_error *err)
{
    *out = infd_calloc(1, sizeof(**out));
    if (!*out)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "rate limits: out of memory");
    pthread_mutex_init(&(*out)->mu, NULL);
    return INFD_STATUS_OK;
}

void cluster_ratelimit_destroy(cluster_ratelimit *rl)
{
    if (!rl)
        return;
    pthread_mutex_destroy(&rl->mu);
    infd_free(rl->clients);
    infd_free(rl);
}

bool cluster_ratelimit_any(const cluster_ratelimit *rl)
{
    return rl && (rl->n_rules > 0 || rl->has_default);
}

/* "RATE[:BURST]" into a full bucket; false when malformed. */
static bool parse_bucket(const char *s, rl_bucket *b)
{
    char *end = NULL;
    errno = 0;
    double rate = strtod(s, &end);
    if (errno || end == s || !isfinite(rate) || rate <= 0 || rate > 1e9)
        return false;
    double burst = rate < 1 ? 1 : rate;
    if (*end == ':') {
        const char *bs = end + 1;
        burst = strtod(bs, &end);
        if (errno || end == bs || !isfinite(burst) || burst < 1 || burst > 1e9)
            return false;
    }
    if (*end != '\0')
        return false;
    b->rate = rate;
    b->burst = burst;
    b->tokens = burst;
    b->last_ns = 0;
    return true;
}

infd_status cluster_ratelimit_add(cluster_ratelimit *rl, const char *rule, infd_error *err)
{
    const char *eq = strrchr(rule, '=');
    bool is_model = strncmp(rule, "model:", 6) == 0;
    bool is_client = strncmp(rule, "client:", 7) == 0;
    const char *key = rule + (is_model ? 6 : 7);
    size_t klen = eq && eq > key ? (size_t)(eq - key) : 0;
    rl_bucket b;
    if ((!is_model && !is_client) || !eq || klen == 0 || klen >= RL_KEY_BYTES ||
        !parse_bucket(eq + 1, &b))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "rate limit '%.100s': expected model:NAME=RATE[:BURST] or "
                              "client:KEY=RATE[:BURST] (KEY * for every other client; RATE per "
                              "second > 0, BURST >= 1; names < %d bytes)",
                              rule, RL_KEY_BYTES);
    char k[RL_KEY_BYTES];
    memcpy(k, key, klen);
    k[klen] = '\0';
    if (is_client && strcmp(k, "*") == 0) {
        if (rl->has_default)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "rate limit '%.100s': client:* is set twice", rule);
        rl->clients = infd_calloc(RL_CLIENTS, sizeof(rl_client));
        if (!rl->clients)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "rate limits: out of memory");
        rl->default_client = b;
        rl->has_default = true;
        return INFD_STATUS_OK;
    }
    for (int i = 0; i < rl->n_rules; i++)
        if (rl->rules[i].is_model == is_model && strcmp(rl->rules[i].key, k) == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "rate limit '%.100s': %s '%s' has a rule already", rule,
                                  is_model ? "model" : "client", k);
    if (rl->n_rules == RL_MAX_RULES)
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "rate limit '%.100s': more than %d rules", rule, RL_MAX_RULES);
    rl_rule *r = &rl->rules[rl->n_rules++];
    r->is_model = is_model;
    snprintf(r->key, sizeof(r->key), "%s", k);
    r->b = b;
    return INFD_STATUS_OK;
}

/* Refills to `now`; whether a token is there. */
static bool refill(rl_bucket *b, uint64_t now_ns)
{
    if (b->last_ns && now_ns > b->last_ns) {
        b->tokens += (double)(now_ns - b->last_ns) * 1e-9 * b->rate;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
    }
    if (!b->last_ns || now_ns > b->last_ns)
        b->last_ns = now_ns;
    return b->tokens >= 1.0;
}

/* The bucket of a client without a rule of its own under "client:*". */
static rl_bucket *client_bucket(cluster_ratelimit *rl, const char *client, uint64_t now_ns)
{
    uint32_t h = infd_hash_str(client);
    rl_client *lru = NULL;
    for (uint32_t i = 0; i < RL_WINDOW; i++) {
        rl_client *c = &rl->clients[(h + i) & (RL_CLIENTS - 1)];
        if (c->used && strcmp(c->key, client) == 0)
            return &c->b;
        if (!c->used) {
            if (!lru || lru->used)
                lru = c;
        } else if (!lru || (lru->used && c->b.last_ns < lru->b.last_ns)) {
            lru = c;
        }
    }
    lru->used = true;
    snprintf(lru->key, sizeof(lru->key), "%s", client);
    lru->b = rl->default_client;
    lru->b.last_ns = now_ns;
    return &lru->b;
}

bool cluster_ratelimit_take(cluster_ratelimit *rl, const char *model, const char *client,
                            uint64_t now_ns, char *why, size_t n)
{
    if (!cluster_ratelimit_any(rl))
        return true;
    if (!client)
        client = "";
    pthread_mutex_lock(&rl->mu);
    rl_bucket *m = NULL, *c = NULL;
    for (int i = 0; i < rl->n_rules; i++) {
        if (rl->rules[i].is_model && !m && strcmp(rl->rules[i].key, model) == 0)
            m = &rl->rules[i].b;
        else if (!rl->rules[i].is_model && !c && strcmp(rl->rules[i].key, client) == 0)
            c = &rl->rules[i].b;
    }
    char ckey[RL_KEY_BYTES];
    snprintf(ckey, sizeof(ckey), "%s", client);
    if (!c && rl->has_default)
        c = client_bucket(rl, ckey, now_ns);
    bool ok = true;
    if (m && !refill(m, now_ns)) {
        snprintf(why, n, "model '%s' is over its rate limit (%g/s, burst %g)", model, m->rate,
                 m->burst);
        ok = false;
    }
    if (ok && c && !refill(c, now_ns)) {
        snprintf(why, n, "client '%s' is over its rate limit (%g/s, burst %g)", ckey, c->rate,
                 c->burst);
        ok = false;
    }
    if (ok) {
        if (m)
            m->tokens -= 1.0;
        if (c)
            c->tokens -= 1.0;
    }
    pthread_mutex_unlock(&rl->mu);
    return ok;
}
