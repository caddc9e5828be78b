/*
 * fuzz_plan_file.c - libFuzzer target for the plan file reader
 * (src/graph/planfile.c).
 *
 * Each input is decoded twice: as is, without the checksum, which exercises
 * every length and count check of the format (and the comparison of the
 * library versions it records with a fixed list); then, when it starts with
 * the magic, with its size field and trailing checksum made consistent and
 * loaded in full (fingerprint, options, records handed to compile), since a
 * mutation that only passes a checksum by luck would leave that path
 * unfuzzed. Every input must load or fail with a message; ASan/UBSan catch
 * the rest. Seeds: plan files `infd build` wrote from make_seeds.py's models
 * (`make fuzz`).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "graph/planfile.h"
#include "infd/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    infd_planfile pf;
    infd_error err = { 0 };
    if (infd_planfile_decode(data, size, "fuzz.plan", false, &pf, &err) == INFD_STATUS_OK) {
        char was[INFD_PLANFILE_LIBS_MAX], is[INFD_PLANFILE_LIBS_MAX];
        infd_planfile_libs_differ(pf.libs, "cuDNN 9.13.0, cuBLASLt 13.1.0, CUDA runtime 13.0", was,
                                  is, sizeof(was));
        infd_planfile_fini(&pf);
    } else if (err.msg[0] == '\0')
        __builtin_trap(); /* every failure must say why */
    if (size < 32 || !infd_planfile_has_magic(data, size))
        return 0;
    uint8_t *d = malloc(size);
    if (!d)
        return 0;
    memcpy(d, data, size);
    for (int i = 0; i < 8; i++)
        d[16 + i] = (uint8_t)((uint64_t)size >> (8 * i));
    uint64_t sum = infd_planfile_hash(d, size - 8);
    for (int i = 0; i < 8; i++)
        d[size - 8 + (size_t)i] = (uint8_t)(sum >> (8 * i));
    infd_plan_options o;
    infd_plan_options_init(&o);
    o.n_threads = 1;
    o.max_contexts = 1;
    infd_plan *p = NULL;
    infd_error_clear(&err);
    if (infd_plan_create_from_memory(d, size, "fuzz.plan", &o, &p, &err) == INFD_STATUS_OK)
        infd_plan_destroy(p);
    else if (err.msg[0] == '\0')
        __builtin_trap();
    free(d);
    return 0;
}
