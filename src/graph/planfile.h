/*
 * planfile.h - plan files: their binary format (planfile.c) and the hooks
 * into the plan compiler (plan.c) that read and apply tuning records.
 *
 * The format is described at the top of planfile.c and in docs/ENGINE.md
 * ("Plan files"). infd_planfile is its parsed form: every pointer in it is
 * borrowed from the bytes it was decoded from (strings are stored with
 * their NUL), except the arrays, which infd_planfile_fini frees.
 */
#ifndef INFD_GRAPH_PLANFILE_H
#define INFD_GRAPH_PLANFILE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"
#include "infd/engine.h"

#define INFD_PLANFILE_MAGIC    "INFDPLAN"
#define INFD_PLANFILE_FORMAT   2u
#define INFD_PLANFILE_MAX_STR  4096u /* longest string field, in bytes */
#define INFD_PLANFILE_LIBS_MAX 256   /* bytes of a library version list, NUL included */

/* One kernel's tuning record, tagged with the node it was made for. */
typedef struct infd_plan_record {
    const char *node;     /* node name in the model ("" when unnamed) */
    const char *op_type;  /* ONNX op, e.g. "Conv" */
    const uint8_t *bytes; /* n_bytes of record; NULL when n_bytes is 0 */
    uint32_t n_bytes;     /* <= INFD_KERNEL_TUNING_MAX (graph/backend.h) */
} infd_plan_record;

/* The records of one batch size, in plan step order. */
typedef struct infd_planfile_batch {
    int64_t batch;
    int32_t n_records;
    infd_plan_record *records;
} infd_planfile_batch;

typedef struct infd_planfile {
    /* The fingerprint of the build. */
    const char *infd_version;
    const char *infd_git;
    const char *backend;
    const char *device;
    const char *libs; /* library versions (infd_devices_libs), "" for none */
    /* The build options. */
    uint32_t device_kind; /* infd_device_kind */
    uint32_t precision;   /* infd_precision */
    int32_t n_shapes;
    infd_input_shape *shapes;
    int32_t n_values;
    infd_input_value *values; /* value.data borrowed, not aligned */
    /* The model. */
    const char *model_name;
    uint64_t model_hash;
    const uint8_t *model;
    uint64_t model_bytes;
    /* Per batch size, ascending. */
    int32_t n_batches;
    infd_planfile_batch *batches;
} infd_planfile;

/* The 64-bit hash plan files use (model hash, file checksum). */
uint64_t infd_planfile_hash(const void *data, size_t n);

/* Appends the encoding of `pf` to `out` (out->oom on failure). */
void infd_planfile_encode(const infd_planfile *pf, infd_strbuf *out);

/* Decodes `n` bytes at `data` into `out` (pointers into `data`), checking
 * the structure and every length against `n`; `path` names the file in
 * messages. check_sum: verify the trailing checksum too. On failure `out`
 * is zeroed. INVALID_ARGUMENT "PATH: ... at byte offset N". */
infd_status infd_planfile_decode(const void *data, size_t n, const char *path, bool check_sum,
                                 infd_planfile *out, infd_error *err);

/* Frees the arrays of a decoded or hand-built plan file. */
void infd_planfile_fini(infd_planfile *pf);

/* True when `n` bytes at `data` start with the magic. */
bool infd_planfile_has_magic(const void *data, size_t n);

/* Loads a plan file by infd_plan_create's rules: `n` bytes at `data`, or
 * when `data` is NULL the file at `path` (mapped for the call). */
infd_status infd_planfile_load(const void *data, size_t n, const char *path,
                               const infd_plan_options *opts, infd_plan **out, infd_error *err);

/* --- plan.c --- */

struct infd_backend_ops;

/* A device readied on a helper thread while the caller reads a model: the
 * backend of `kind`'s `available`, and with `prepare` its `prepare` slot
 * too (graph/backend.h). infd_device_prep_join waits for it and returns its
 * status (OK for a backend with neither slot); start never fails (without
 * a thread the work runs in start). */
typedef struct infd_device_prep {
    const void *backend; /* const infd_backend_ops *, or NULL: nothing to do */
    int index;
    bool prepare;
    bool threaded;
    bool failed_in_prepare; /* st comes from prepare, not available */
    pthread_t thread;
    infd_status st;
    infd_error err;
} infd_device_prep;

void infd_device_prep_start(infd_device_prep *d, infd_device_kind kind, int index, bool prepare);
/* The same for a given backend (NULL: nothing to do); tests pass their
 * own. */
void infd_device_prep_start_backend(infd_device_prep *d, const struct infd_backend_ops *backend,
                                    int index, bool prepare);
infd_status infd_device_prep_join(infd_device_prep *d, infd_error *err);

/* infd_plan_create_from_memory of an ONNX model, compiling step s with
 * records[s] as its tuning record (n_records must equal the plan's steps,
 * each tagged with the step's node name and op type, else INVALID_ARGUMENT
 * naming `name`). records NULL: tune afresh. */
infd_status infd_plan_create_tuned(const void *onnx, size_t n, const char *name,
                                   const infd_plan_options *opts, const infd_plan_record *records,
                                   int32_t n_records, infd_plan **out, infd_error *err);

/* Steps of a plan, and step s's record (pointers valid while the plan
 * lives). */
int32_t infd_plan_n_records(const infd_plan *p);
void infd_plan_record_at(const infd_plan *p, int32_t s, infd_plan_record *out);

/* The backend the plan runs on ("cpu", "cuda"). */
const char *infd_plan_backend_name(const infd_plan *p);

/* --- devices.c --- */

/* The versions of the libraries that tuning records of `kind` depend on,
 * as loaded by this process, into `buf` (`n` bytes): for CUDA "cuDNN
 * 9.13.0, cuBLASLt 13.1.0, CUDA runtime 13.0" (entries "NAME VERSION"
 * joined by ", "), "" for the CPU (which writes no records) and in builds
 * without the backend. Needs no device. */
void infd_devices_libs(infd_device_kind kind, char *buf, size_t n);

/* --- planfile.c --- */

/* Compares the library versions a plan was built with (`built`, as
 * infd_devices_libs wrote them) with this process's (`here`). Equal: false.
 * Otherwise true, with the first difference written for a message:
 * `was` gets "cuDNN 9.13.0" and `is` "cuDNN 9.10.2" (or "no cuDNN" for a
 * library one side lacks; the whole lists when they differ otherwise),
 * each `n` bytes. */
bool infd_planfile_libs_differ(const char *built, const char *here, char *was, char *is, size_t n);

#endif /* INFD_GRAPH_PLANFILE_H */
