/*
 * link.h - the router-worker link's message contents (proto/cluster.proto),
 * decoded without sockets, so the worker, the router and the fuzz target
 * share them.
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

/*
 * Output k of a RESULT's response (resp->outputs[k]), its bytes `size` long
 * at `data` (its frame): the model's index for it (*j) and a tensor viewing
 * the bytes (*t). INTERNAL with a message when the worker names an output
 * the model does not have, a datatype infd does not know, or a rank above
 * INFD_MAX_RANK. The shape against the model and the bytes is checked when
 * the output is set (infd_request_output_set / _adopt).
 */
infd_status cluster_link_output(const infd_model *model, const Inference__ModelInferResponse *resp,
                                size_t k, const void *data, size_t size, int *j, infd_tensor *t,
                                infd_error *err);

#endif /* INFD_CLUSTER_LINK_H */
