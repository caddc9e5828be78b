/*
 * plugins.h - infd's built-in pre- and post-processors (docs/PIPELINES.md):
 * model kinds over the public plugin API (include/infd/plugin.h), so each is
 * a model like any other and a step of an ensemble.
 *
 *   backend "image_decode"      JPEG/PNG bytes -> a letterboxed, normalized
 *                               S x S x 3 FP32 image, and where it sits
 *   backend "blazeface_decode"  BlazeFace's four outputs -> faces (box, six
 *                               landmarks, score) in the original image's
 *                               pixels, by MediaPipe's anchors and weighted NMS
 *
 * The default repository's `face_detect` ensemble chains them around
 * BlazeFace. Built into libinfd_plugins.a, which `infd serve` links and
 * registers; an embedder calls infd_plugins_register once before creating
 * servers.
 */
#ifndef INFD_PLUGINS_PLUGINS_H
#define INFD_PLUGINS_PLUGINS_H

#include "infd/infd.h"

/* Registers the built-in kinds (once per process; later calls are no-ops). */
infd_status infd_plugins_register(infd_error *err);

#endif /* INFD_PLUGINS_PLUGINS_H */
