/*
 * weights.h - one copy of a model's constants, however many plans.
 *
 * An infd_weights (engine.h) is a loaded model whose plans share their
 * constants. Plans of one model differ in their input shapes (batch sizes,
 * audio lengths), device and precision, but mostly hold the same bytes:
 * the same initializers, the same folded weights (BatchNorm folded into a
 * Conv gives the same result at every batch size), the same reordered or
 * converted forms (oneDNN's blocked weights, FP16 NHWC on the GPU). Each
 * plan used to keep its own copy of all of it (issue #28: ResNet-50 served
 * with 3 batch sizes held 895 MB).
 *
 * A *form* is bytes derived from a constant: the constant itself as the
 * plan reads it at run time, or what a backend made of it. Forms live in
 * the weights' table under a key, refcounted: each holder (a plan for its
 * run-time constants, a kernel for its prepared weights) takes a handle
 * and releases it when it is destroyed; the last release frees the bytes.
 * The key is what the bytes are made from, not where they are:
 *
 *   src      XXH3-128 of the source bytes and their length (what the
 *            constant holds: two plans that fold the same BatchNorm into
 *            the same Conv get the same key without sharing a pointer)
 *   form     XXH3-128 of a tag and the backend's description of what it
 *            makes ("dnnl:reorder" + the source and target memory
 *            descriptors, say)
 *   device   -1 for host memory, else the backend's device index
 *
 * So a plan compiled later (another audio length, after the model's own
 * copy was released by infd_weights_trim) finds the forms the first plans
 * made and reuses them: nothing is made twice and nothing is held twice.
 * XXH3-128 (libxxhash) is not a cryptographic hash: a model crafted to
 * collide two of its own constants could corrupt its own outputs, nothing
 * else (the table is per model).
 *
 * Threads: the table is guarded by the weights' mutex; a form being made
 * is marked pending, and a second plan wanting it waits for the first
 * (plans of one model may compile in parallel) rather than making it too.
 * make() runs without the lock.
 */
#ifndef INFD_GRAPH_WEIGHTS_H
#define INFD_GRAPH_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/ir.h"
#include "infd/engine.h"

/* A reference to one shared form. */
typedef struct infd_weight_form infd_weight_form;

typedef struct infd_form_key {
    uint64_t src[2]; /* XXH3-128 of the source bytes */
    uint64_t src_bytes;
    uint64_t form[2]; /* XXH3-128 of the tag and the description */
    int32_t device;   /* -1: host memory; else the backend's device index */
} infd_form_key;

/* Fills a key: `src` (src_bytes bytes) is what the form is made from; `tag`
 * (a string) and `desc` (desc_bytes, may be NULL) say what is made of it;
 * device -1 for host memory. */
void infd_form_key_init(infd_form_key *k, const void *src, size_t src_bytes, const char *tag,
                        const void *desc, size_t desc_bytes, int32_t device);

/* Makes a form: sets *data (freed later with free_fn(data, device,
 * free_arg), the function and argument given beside it: a device backend's
 * ops, say) and *bytes. Errors name the node in `err`. */
typedef infd_status (*infd_form_make_fn)(void *ctx, void **data, size_t *bytes, infd_error *err);
typedef void (*infd_form_free_fn)(void *data, int32_t device, const void *arg);

/* The form under `k`: an existing one (a new reference), or one made now
 * with make(ctx) and kept in the table. On success *out is a handle to
 * release with infd_weight_form_release. w NULL: made unshared (a handle
 * all the same). Errors: those of make, OUT_OF_MEMORY "<what>: out of
 * memory" (`what` names the holder: "model.onnx: node 'conv1' (Conv)"). */
infd_status infd_weights_form(infd_weights *w, const infd_form_key *k, infd_form_make_fn make,
                              void *ctx, infd_form_free_fn free_fn, const void *free_arg,
                              const char *what, infd_weight_form **out, infd_error *err);

/* The shared copy of `bytes` bytes at `data` in host memory
 * (INFD_ALIGNMENT-aligned): the form "bytes" of that content. */
infd_status infd_weights_copy(infd_weights *w, const void *data, size_t bytes, const char *what,
                              infd_weight_form **out, infd_error *err);

/* A form's bytes: valid while the handle is held. */
void *infd_weight_form_data(const infd_weight_form *f);
size_t infd_weight_form_bytes(const infd_weight_form *f);

/* Drops a reference; the last one frees the bytes. NULL is a no-op. */
void infd_weight_form_release(infd_weight_form *f);

/* Plans hold a reference to their weights (plan.c). */
void infd_weights_retain(infd_weights *w);
void infd_weights_release(infd_weights *w);

/* The model as loaded (shapes symbolic, constants the model's own), loaded
 * again from the file when infd_weights_trim dropped it. Borrowed: valid,
 * and its constants too, until the matching infd_weights_unuse_model; a
 * trim meanwhile waits for the last user to let go (and a model loaded
 * again after a trim goes again with its last user). Several plan builds
 * may use it at once: they only read it. */
infd_status infd_weights_use_model(infd_weights *w, const infd_ir_graph **out, infd_error *err);
void infd_weights_unuse_model(infd_weights *w);

/* Frees the model as loaded even when it cannot be loaded again (weights
 * a single plan was built from: infd_plan_create). */
void infd_weights_drop_model(infd_weights *w);

/* The name the weights were made with (the file's path), for messages. */
const char *infd_weights_name(const infd_weights *w);

/* Counts a plan built from w (statistics). */
void infd_weights_count_plan(infd_weights *w, int delta);

/* The bytes a plan's runs read for constant `name` (its shared copy), or
 * NULL when the plan keeps none under that name (folded away, or made
 * into a kernel's own form). For tests and diagnostics (plan.c). */
const void *infd_plan_constant_data(const infd_plan *p, const char *name);

#endif /* INFD_GRAPH_WEIGHTS_H */
