/*
 * link.c - an INFER's request and a RESULT's outputs, from their header and
 * frames (link.h).
 */
#include "cluster/link.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontends/grpc/infer_params.h"

infd_status cluster_link_request(infd_server *server, const Infd__Cluster__LinkMessage *h,
                                 const infd_data_segment *frames, int n_frames, infd_model **model,
                                 infd_request **req, infd_error *err)
{
    *model = NULL;
    *req = NULL;
    const Inference__ModelInferRequest *r = h->request;
    uint64_t timeout_us = h->timeout_us;
    if (!r)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "an INFER without a request");
    int64_t version = -1;
    if (r->model_version && *r->model_version) {
        char *end;
        version = strtoll(r->model_version, &end, 10);
        if (*end || version < 1)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "model version '%.40s' is not a positive integer",
                                  r->model_version);
    }
    infd_status st =
        infd_server_model_acquire(server, r->model_name ? r->model_name : "", version, model, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (r->n_inputs == 0 || r->n_inputs > INFD_MAX_MODEL_IO)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%zu inputs in the header: 1 to %d", r->n_inputs, INFD_MAX_MODEL_IO);
    if (h->n_input_frames == 0 && (int)r->n_inputs != n_frames)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%zu inputs in the header, %d frames after it: one frame per "
                              "input",
                              r->n_inputs, n_frames);
    if (h->n_input_frames != 0) {
        bool ok = h->n_input_frames == r->n_inputs;
        int64_t sum = 0;
        for (size_t i = 0; ok && i < h->n_input_frames; i++) {
            ok = h->input_frames[i] >= 1;
            sum += h->input_frames[i];
        }
        if (!ok || sum != n_frames)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input_frames has %zu counts adding up to %lld for %zu inputs "
                                  "and %d frames: one count of at least 1 per input, adding up "
                                  "to the frames",
                                  h->n_input_frames, (long long)sum, r->n_inputs, n_frames);
    }
    if ((st = infd_request_create(*model, req, err)) != INFD_STATUS_OK)
        return st;
    infd_request_set_id(*req, r->id ? r->id : "");
    if (timeout_us > 0)
        infd_request_set_timeout_us(*req, timeout_us);
    int64_t v = 0;
    bool bad = false;
    if (grpc_param_int(r, "priority", &v, &bad) && !bad && v > 0 && v <= UINT32_MAX &&
        (st = infd_request_set_priority(*req, (uint32_t)v, err)) != INFD_STATUS_OK)
        return st;
    if ((st = grpc_set_sequence(r, *req, err)) != INFD_STATUS_OK)
        return st;
    int at = 0;
    for (size_t i = 0; i < r->n_inputs; i++) {
        const Inference__ModelInferRequest__InferInputTensor *t = r->inputs[i];
        const char *name = t->name ? t->name : "";
        infd_dtype dt = infd_dtype_from_name(t->datatype ? t->datatype : "");
        if (dt == INFD_DTYPE_INVALID)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input '%.127s': unknown datatype '%.32s'", name,
                                  t->datatype ? t->datatype : "");
        if (t->n_shape > INFD_MAX_RANK)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "input '%.127s': rank %zu is above %d", name, t->n_shape,
                                  INFD_MAX_RANK);
        int n = h->n_input_frames ? (int)h->input_frames[i] : 1;
        st = infd_request_add_input_segments(*req, name, dt, t->shape, (int)t->n_shape, frames + at,
                                             n, err);
        at += n;
        if (st != INFD_STATUS_OK)
            return st;
    }
    return grpc_add_outputs(r, *req, err);
}

infd_status cluster_link_output(const infd_model *model, const Inference__ModelInferResponse *resp,
                                size_t k, const void *data, size_t size, int *j, infd_tensor *t,
                                infd_error *err)
{
    const Inference__ModelInferResponse__InferOutputTensor *o = resp->outputs[k];
    const char *name = o->name ? o->name : "";
    *j = infd_model_output_index(model, name);
    if (*j < 0)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "the worker's output '%.100s' is not one of model '%s'", name,
                              infd_model_name(model));
    memset(t, 0, sizeof(*t));
    t->dtype = infd_dtype_from_name(o->datatype ? o->datatype : "");
    if (t->dtype == INFD_DTYPE_INVALID)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "the worker's output '%.100s' has an unknown datatype '%.32s'", name,
                              o->datatype ? o->datatype : "");
    if (o->n_shape > INFD_MAX_RANK)
        return infd_error_set(err, INFD_STATUS_INTERNAL,
                              "the worker's output '%.100s' has rank %zu (at most %d)", name,
                              o->n_shape, INFD_MAX_RANK);
    t->shape.rank = (int)o->n_shape;
    for (size_t d = 0; d < o->n_shape; d++)
        t->shape.dims[d] = o->shape[d];
    t->data = (void *)data;
    t->nbytes = size;
    return INFD_STATUS_OK;
}
