/*
 * ratelimit.h - the router's token buckets (docs/CLUSTER.md, "Limits"):
 * per model and per client key, from `--rate-limit` rules.
 *
 * A rule is "model:NAME=RATE[:BURST]" or "client:KEY=RATE[:BURST]", RATE
 * in requests per second (a decimal > 0) and BURST the bucket's size
 * (default: one second's worth, at least 1). "client:*" gives every other
 * client key a bucket of its own with that rule; requests without a key
 * count as the client "". A request passes when every bucket that applies
 * to it holds a token, and then takes one from each; otherwise it takes
 * none.
 *
 * Any thread may call cluster_ratelimit_take (a mutex guards the buckets).
 * Client buckets of "client:*" live in a table of RL_CLIENTS entries; a
 * new key takes the least recently used entry of its probe window, which
 * is harmless once that bucket has refilled.
 */
#ifndef INFD_CLUSTER_RATELIMIT_H
#define INFD_CLUSTER_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infd/infd.h"

typedef struct cluster_ratelimit cluster_ratelimit;

/* An empty set of rules (every request passes). */
infd_status cluster_ratelimit_create(cluster_ratelimit **out, infd_error *err);
void cluster_ratelimit_destroy(cluster_ratelimit *rl);

/* Adds a rule (syntax above). INVALID_ARGUMENT, saying what is wrong, for
 * a malformed one or a second rule for the same model or key. */
infd_status cluster_ratelimit_add(cluster_ratelimit *rl, const char *rule, infd_error *err);

/* Whether any rule is set (no rules: callers may skip the call). */
bool cluster_ratelimit_any(const cluster_ratelimit *rl);

/* Takes a token for a request of `model` from `client` at `now_ns`
 * (CLOCK_MONOTONIC). false: refused; `why` (n bytes) says which limit. */
bool cluster_ratelimit_take(cluster_ratelimit *rl, const char *model, const char *client,
                            uint64_t now_ns, char *why, size_t n);

#endif /* INFD_CLUSTER_RATELIMIT_H */
