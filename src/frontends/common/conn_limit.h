/*
 * conn_limit.h - connections in total and per client address (issue #24).
 *
 * A frontend asks enter() for each new connection with the client's address
 * and calls leave() with the same address when an admitted one closes.
 * Addresses are counted by IP (the port ignored; IPv4 and IPv4-mapped IPv6
 * are the same client). Thread-safe: one table serves every event loop of a
 * frontend. An admission costs a hash lookup under a mutex.
 */
#ifndef INFD_FRONTENDS_COMMON_CONN_LIMIT_H
#define INFD_FRONTENDS_COMMON_CONN_LIMIT_H

#include <sys/socket.h>

typedef struct infd_conn_limit infd_conn_limit;

typedef enum infd_conn_verdict {
    INFD_CONN_ADMITTED,
    INFD_CONN_OVER_TOTAL,      /* max_total connections are open */
    INFD_CONN_OVER_PER_CLIENT, /* this address has max_per_client open */
    INFD_CONN_NO_MEMORY,       /* a new address could not be recorded */
} infd_conn_verdict;

/* Limits of 0 are off. NULL on out of memory. */
infd_conn_limit *infd_conn_limit_create(int max_total, int max_per_client);

/* Frees the table (open connections are forgotten). NULL is a no-op. */
void infd_conn_limit_destroy(infd_conn_limit *l);

/* Counts a connection from `peer` (AF_INET or AF_INET6; another family, or
 * NULL, counts toward the total only) when both limits allow it. */
infd_conn_verdict infd_conn_limit_enter(infd_conn_limit *l, const struct sockaddr *peer);

/* Releases a connection enter() admitted, from the same `peer`. */
void infd_conn_limit_leave(infd_conn_limit *l, const struct sockaddr *peer);

/* Connections admitted and not yet left. */
int infd_conn_limit_open(infd_conn_limit *l);

#endif /* INFD_FRONTENDS_COMMON_CONN_LIMIT_H */
