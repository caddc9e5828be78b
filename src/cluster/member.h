/*
 * member.h - a worker's membership in the cluster (docs/CLUSTER.md): `infd
 * serve --cluster URL[,URL...] --advertise tcp://HOST:PORT`.
 *
 * The worker holds one etcd lease (TTL 5 s by default, kept alive every
 * TTL/3) and, under it, the key <prefix>/workers/<id> whose value is a JSON
 * document: its id, the advertised address, its HTTP and gRPC ports, infd's
 * version, the models with their versions, states and (READY ones) configs
 * as JSON text, and when it started.
 * The value is written again when the models change (the index is looked at
 * once a second, so a worker writes to etcd at most once a second). A lease
 * that etcd lost (expired while etcd was unreachable, or a new cluster) is
 * granted again and the key put again; etcd being away never stops the
 * worker, which keeps serving and keeps trying.
 *
 * Leaving: cluster_member_leave revokes the lease, so the key goes at once
 * and routers stop sending here; the server then drains. SIGKILL leaves
 * the key to expire with the lease.
 *
 * Threads: one thread of its own runs a libevent loop with the etcd client.
 * Start, leave and stop are called from the thread that owns the server.
 */
#ifndef INFD_CLUSTER_MEMBER_H
#define INFD_CLUSTER_MEMBER_H

#include <stdbool.h>
#include <stdint.h>

#include "infd/infd.h"

typedef struct cluster_member cluster_member;

typedef struct cluster_member_options {
    const char *etcd;         /* "http://HOST:PORT[,...]" (required) */
    const char *advertise;    /* "tcp://HOST:PORT": where routers reach this worker (required) */
    const char *prefix;       /* key prefix; default "/infd" */
    const char *id;           /* default HOST-PID */
    int ttl_s;                /* lease TTL; default 5, at least 2 */
    int http_port, grpc_port; /* reported in the value (-1: off) */
} cluster_member_options;

void cluster_member_options_init(cluster_member_options *o);

/* Starts the thread; registration happens in the background (the log says
 * when it is done, and when etcd is away). INVALID_ARGUMENT for bad
 * options, naming them. */
infd_status cluster_member_start(infd_server *server, const cluster_member_options *o,
                                 cluster_member **out, infd_error *err);

/* Revokes the lease and waits for etcd's answer, at most 2 s. NULL: no-op. */
void cluster_member_leave(cluster_member *m);

/* Stops the thread and frees. NULL: no-op. */
void cluster_member_stop(cluster_member *m);

/* The worker's id and its key in etcd. */
const char *cluster_member_id(const cluster_member *m);
const char *cluster_member_key(const cluster_member *m);

#endif /* INFD_CLUSTER_MEMBER_H */
