/*
 * plugins_internal.h - what the built-in processors share: their kind
 * tables and reading numeric parameters of config.pbtxt.
 */
#ifndef INFD_PLUGINS_PLUGINS_INTERNAL_H
#define INFD_PLUGINS_PLUGINS_INTERNAL_H

#include "infd/plugin.h"

extern const infd_model_kind plugin_image_decode_kind;
extern const infd_model_kind plugin_blazeface_decode_kind;
extern const infd_model_kind plugin_python_kind;
extern const infd_model_kind plugin_softmax_kind;

/* parameters { key: KEY value { string_value: "..." } } as an integer in
 * [lo, hi] or a float; *out is left alone when the parameter is absent.
 * INVALID_ARGUMENT naming the key otherwise. */
infd_status plugin_param_int(const infd_kind_model *km, const char *key, int lo, int hi, int *out,
                             infd_error *err);
infd_status plugin_param_float(const infd_kind_model *km, const char *key, float *out,
                               infd_error *err);

#endif /* INFD_PLUGINS_PLUGINS_INTERNAL_H */
