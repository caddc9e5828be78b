/*
 * link.h - the router-worker link's message contents (proto/cluster.proto),
 * decoded without sockets, so the worker and the fuzz target share them.
 */
#ifndef INFD_CLUSTER_LINK_H
#define INFD_CLUSTER_LINK_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.pb-c.h"
#include "infd/infd.h"

/* Most tensor frames an INFER may have (cluster.proto's input_frames). */
#define CLUSTER_LINK_MAX_FRAMES 512

/*
 * The request of an INFER: the model acquired (*model, release it with
 * infd_model_release) and a request made with its id, timeout, priority,
 * sequence, inputs and requested outputs. The inputs point into the
 * frames (`frames`, n_frames of them after the header, borrowed until the
 * request is done): one per input in h->request's order, or as many as
 * h->input_frames says. Not submitted. On error *model and *req may be set
 * (the caller frees them); the message says what is wrong, as the gRPC
 * frontend would.
 */
infd_status cluster_link_request(infd_server *server, const Infd__Cluster__LinkMessage *h,
                                 const infd_data_segment *frames, int n_frames, infd_model **model,
                                 infd_request **req, infd_error *err);

#endif /* INFD_CLUSTER_LINK_H */
