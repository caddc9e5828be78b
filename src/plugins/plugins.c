/*
 * plugins.c - registering the built-in processors, and their parameters.
 */
#include "plugins/plugins.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
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

static pthread_once_t once = PTHREAD_ONCE_INIT;
static infd_status once_status;
static infd_error once_err;

static void register_all(void)
{
    once_status = infd_model_kind_register(&plugin_image_decode_kind, &once_err);
    if (once_status == INFD_STATUS_OK)
        once_status = infd_model_kind_register(&plugin_blazeface_decode_kind, &once_err);
    if (once_status == INFD_STATUS_OK)
        once_status = infd_model_kind_register(&plugin_python_kind, &once_err);
    if (once_status == INFD_STATUS_OK)
        once_status = infd_model_kind_register(&plugin_softmax_kind, &once_err);
}

infd_status infd_plugins_register(infd_error *err)
{
    pthread_once(&once, register_all);
    if (once_status != INFD_STATUS_OK && err)
        *err = once_err;
    return once_status;
}
