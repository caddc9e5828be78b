/*
 * infer_params.c - a ModelInferRequest's parameters onto an infd_request:
 * what the gRPC frontend and the cluster's worker link (which carries the
 * same message) both read.
 */
#include "frontends/grpc/infer_params.h"

#include <stdint.h>
#include <string.h>

/* An integer request parameter ("priority", "timeout"); false when absent. */
bool grpc_param_int(const Inference__ModelInferRequest *r, const char *key, int64_t *out, bool *bad)
{
    for (size_t i = 0; i < r->n_parameters; i++) {
        const Inference__ModelInferRequest__ParametersEntry *e = r->parameters[i];
        if (!e->key || strcmp(e->key, key) != 0 || !e->value)
            continue;
        switch (e->value->parameter_choice_case) {
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
            *out = e->value->int64_param;
            return true;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
            *out = e->value->uint64_param > INT64_MAX ? INT64_MAX : (int64_t)e->value->uint64_param;
            return true;
        default:
            *bad = true;
            return false;
        }
    }
    return false;
}

/* An output's "classification" parameter (Triton's extension; tritonclient
 * sends int64): *out 0 when absent; false when it is not 1..1000000. */
static bool
grpc_output_class_count(const Inference__ModelInferRequest__InferRequestedOutputTensor *o,
                        int64_t *out)
{
    *out = 0;
    for (size_t i = 0; i < o->n_parameters; i++) {
        const Inference__ModelInferRequest__InferRequestedOutputTensor__ParametersEntry *e =
            o->parameters[i];
        if (!e->key || strcmp(e->key, "classification") != 0 || !e->value)
            continue;
        switch (e->value->parameter_choice_case) {
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
            *out = e->value->int64_param;
            break;
        case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
            *out = e->value->uint64_param > 1000000 ? -1 : (int64_t)e->value->uint64_param;
            break;
        default:
            return false;
        }
        return *out >= 1 && *out <= 1000000;
    }
    return true;
}

/* Triton's sequence parameters: sequence_id (int64, uint64 or string),
 * sequence_start and sequence_end (bool). OK when there are none. */
infd_status grpc_set_sequence(const Inference__ModelInferRequest *r, infd_request *req,
                              infd_error *err)
{
    bool has = false;
    uint64_t id = 0;
    const char *sid = NULL;
    uint32_t flags = 0;
    for (size_t i = 0; i < r->n_parameters; i++) {
        const Inference__ModelInferRequest__ParametersEntry *e = r->parameters[i];
        if (!e->key || !e->value)
            continue;
        int c = e->value->parameter_choice_case;
        if (strcmp(e->key, "sequence_id") == 0) {
            has = true;
            if (c == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
                e->value->int64_param >= 0)
                id = (uint64_t)e->value->int64_param;
            else if (c == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM)
                id = e->value->uint64_param;
            else if (c == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
                sid = e->value->string_param;
            else
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "parameter 'sequence_id' must be a non-negative integer or "
                                      "a string");
        } else if (strcmp(e->key, "sequence_start") == 0 || strcmp(e->key, "sequence_end") == 0) {
            if (c != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "parameter '%s' must be a bool", e->key);
            if (e->value->bool_param)
                flags |= e->key[9] == 's' ? INFD_SEQUENCE_START : INFD_SEQUENCE_END;
        }
    }
    if (!has)
        return INFD_STATUS_OK;
    return infd_request_set_sequence(req, id, sid, flags, err);
}

infd_status grpc_add_outputs(const Inference__ModelInferRequest *r, infd_request *req,
                             infd_error *err)
{
    for (size_t j = 0; j < r->n_outputs; j++) {
        int64_t classes = 0;
        if (!grpc_output_class_count(r->outputs[j], &classes))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "output '%.127s': parameter 'classification' must be an integer "
                                  "from 1 to 1000000",
                                  r->outputs[j]->name);
        infd_status st = classes > 0 ? infd_request_add_output_classification(
                                           req, r->outputs[j]->name, (int)classes, err)
                                     : infd_request_add_output(req, r->outputs[j]->name, err);
        if (st != INFD_STATUS_OK)
            return st;
    }
    return INFD_STATUS_OK;
}
