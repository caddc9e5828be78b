/*
 * infer_params.h - Triton's ModelInferRequest parameters (priority,
 * timeout, sequence_id / sequence_start / sequence_end) and requested
 * outputs (with their classification), shared by the gRPC frontend and the
 * cluster's worker link.
 */
#ifndef INFD_FRONTENDS_GRPC_INFER_PARAMS_H
#define INFD_FRONTENDS_GRPC_INFER_PARAMS_H

#include <stdbool.h>
#include <stdint.h>

#include "grpc_service.pb-c.h"
#include "infd/infd.h"

/* An integer request parameter ("priority", "timeout"): true and *out when
 * present as an int64 or uint64; *bad set when present with another type. */
bool grpc_param_int(const Inference__ModelInferRequest *r, const char *key, int64_t *out,
                    bool *bad);

/* Asks `req` for the outputs `r` names (none: all), with the
 * classification extension where an output's parameters ask for it. */
infd_status grpc_add_outputs(const Inference__ModelInferRequest *r, infd_request *req,
                             infd_error *err);

/* Sets the request's sequence from sequence_id (int64, uint64 or string),
 * sequence_start and sequence_end (bool). OK when there are none. */
infd_status grpc_set_sequence(const Inference__ModelInferRequest *r, infd_request *req,
                              infd_error *err);

#endif /* INFD_FRONTENDS_GRPC_INFER_PARAMS_H */
