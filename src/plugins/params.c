/*
 * params.c - the built-in processors' numeric parameters (config.pbtxt's
 * string values), checked with the key named in every error.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "plugins/plugins_internal.h"

infd_status plugin_param_int(const infd_kind_model *km, const char *key, int lo, int hi, int *out,
                             infd_error *err)
{
    const char *v = infd_kind_model_parameter(km, key);
    if (!v)
        return INFD_STATUS_OK;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end || errno || n < lo || n > hi)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameter '%s' is '%.40s': an integer in %d..%d", key, v, lo, hi);
    *out = (int)n;
    return INFD_STATUS_OK;
}

infd_status plugin_param_float(const infd_kind_model *km, const char *key, float *out,
                               infd_error *err)
{
    const char *v = infd_kind_model_parameter(km, key);
    if (!v)
        return INFD_STATUS_OK;
    char *end;
    errno = 0;
    float f = strtof(v, &end);
    if (!*v || *end || errno || !isfinite(f))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "parameter '%s' is '%.40s': a finite number", key, v);
    *out = f;
    return INFD_STATUS_OK;
}
