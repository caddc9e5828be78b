/*
 * plugins.c - registering the built-in processors.
 */
#include "plugins/plugins.h"

#include <pthread.h>

#include "plugins/plugins_internal.h"

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
