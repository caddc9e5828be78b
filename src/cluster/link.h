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

/*
 * The request of an INFER: the model acquired (*model, release it with
 * infd_model_release) and a request made with its id, timeout, priority,
 * sequence, inputs (pointing into the frames: data[i], size[i], one per
 * input in r->inputs order; n_frames of them) and requested outputs. Not
 * submitted. On error *model and *req may be set (the caller frees them);
 * the message says what is wrong, as the gRPC frontend would.
 */
infd_status cluster_link_request(infd_server *server, const Inference__ModelInferRequest *r,
                                 uint64_t timeout_us, const void *const *data, const size_t *size,
                                 int n_frames, infd_model **model, infd_request **req,
                                 infd_error *err);

#endif /* INFD_CLUSTER_LINK_H */
