/*
 * conn_limit.h - connections in total and per client address (issue #24).
 *
 * A frontend asks enter() for each new connection with its socket and the
 * client's address, and calls leave() with the ticket enter() gave when an
 * admitted one closes.
 * Addresses are counted by IP (the port ignored; IPv4 and IPv4-mapped IPv6
 * are the same client). Thread-safe: one table serves every event loop of a
 * frontend. An admission costs a hash lookup and an fstat under a mutex.
 */
#ifndef INFD_FRONTENDS_COMMON_CONN_LIMIT_H
#define INFD_FRONTENDS_COMMON_CONN_LIMIT_H

#include <stdint.h>
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

/* Counts the connection on socket `fd` (open, from `peer`: AF_INET or
 * AF_INET6; another family, or NULL, counts toward the total only) when
 * both limits allow it, and sets *ticket to its admission (0 when it is not
 * admitted).
 *
 * The table remembers each admitted socket by its fd number and inode, so
 * that a closed connection's place comes back even when the frontend has
 * not said so yet (events of several threads arrive in any order):
 * - a connection recorded on the same fd number is released first (the
 *   number was given again, so that socket is closed);
 * - at a limit, the connections whose socket is closed, or whose client
 *   has hung up (POLLRDHUP: the server has not read the end yet), are
 *   released and the limits asked again. At the per-client limit the scan
 *   visits that address's connections, at the total every one. After a
 *   scan that released nothing the next waits 100 ms (per address at the
 *   per-client limit): a client over its limit that keeps its connections
 *   open cannot make each refusal cost a scan. */
infd_conn_verdict infd_conn_limit_enter(infd_conn_limit *l, int fd, const struct sockaddr *peer,
                                        uint64_t *ticket);

/* Releases admission `ticket` of socket `fd`; a no-op when it was released
 * already (a later enter on the same fd number, or a scan) or is 0. */
void infd_conn_limit_leave(infd_conn_limit *l, int fd, uint64_t ticket);

/* Connections admitted and not yet left. */
int infd_conn_limit_open(infd_conn_limit *l);

#endif /* INFD_FRONTENDS_COMMON_CONN_LIMIT_H */
