/*
 * cuda_libs.cu - dlopen of cuDNN and cuBLASLt (cuda_libs.h says why).
 *
 * The libraries are opened RTLD_LOCAL: nothing else in the process resolves
 * symbols against them, and they stay loaded until the process exits
 * (never dlclose'd: the runtime's own teardown may still call into them).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_libs.h"

infd_cuda_lib_table infd_cuda_libs;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_rc = -1;
static char load_why[512];

/* Opens `soname`; on failure writes the reason and returns NULL. */
static void *open_lib(const char *soname, const char *what)
{
    void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(load_why, sizeof(load_why), "cannot load %s: %s: %s is needed for --device cuda",
                 soname, e ? e : "unknown error", what);
    }
    return h;
}

/* Stores the address of `name` in `slot` (a function pointer of the
 * table); false with the reason when the library lacks it. */
static bool load_sym(void *h, const char *soname, const char *name, void *slot)
{
    void *sym = dlsym(h, name);
    if (!sym) {
        snprintf(load_why, sizeof(load_why),
                 "%s has no %s: an older library than infd was built for", soname, name);
        return false;
    }
    memcpy(slot, &sym, sizeof(sym));
    return true;
}

/* Opens both libraries and fills the table. In LOAD_DNN and LOAD_LT only #
 * and ## may touch f: the call macros of cuda_libs.h do not expand there
 * (and would in a nested macro). */
static void load(void)
{
    void *dnn = open_lib(INFD_CUDNN_SONAME, "cuDNN 9");
    if (!dnn)
        return;
    void *lt = open_lib(INFD_CUBLASLT_SONAME, "cuBLASLt 13 (the CUDA 13 toolkit's)");
    if (!lt) {
        dlclose(dnn);
        return;
    }
#define LOAD_DNN(f)                                                           \
    if (!load_sym(dnn, INFD_CUDNN_SONAME, #f, (void *)&infd_cuda_libs.p_##f)) \
        return;
#define LOAD_LT(f)                                                              \
    if (!load_sym(lt, INFD_CUBLASLT_SONAME, #f, (void *)&infd_cuda_libs.p_##f)) \
        return;
    INFD_CUDNN_FUNCTIONS(LOAD_DNN)
    INFD_CUBLASLT_FUNCTIONS(LOAD_LT)
#undef LOAD_LT
#undef LOAD_DNN
    load_rc = 0;
}

extern "C" int infd_cuda_libs_load(char *why, size_t n)
{
    pthread_once(&load_once, load);
    if (load_rc != 0 && why && n)
        snprintf(why, n, "%s", load_why);
    return load_rc;
}
