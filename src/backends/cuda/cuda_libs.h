/*
 * cuda_libs.h - cuDNN and cuBLASLt, loaded the first time a GPU is used.
 *
 * A process that never builds a CUDA plan maps neither library: linked,
 * libcudnn.so.9 and libcublasLt.so.13 (and what they pull in) were loaded
 * and relocated at start by every infd process, CPU-only ones included,
 * 150-200 MB of RSS and a slower start (issue #28). So the backend
 * calls them through a table of function pointers that
 * infd_cuda_libs_load fills with dlopen/dlsym, once per process, from the
 * backend's `available` slot (infd_cuda_check_device: every plan, before
 * any kernel) and from `infd --version` (infd_cuda_library_versions).
 *
 * Every function the backend calls is in the lists below; the macros after
 * the table turn the call `cudnnCreate(&h)` into a call through the table,
 * so call sites read as the libraries' own API. A function missing from
 * the lists is an undefined symbol at link time (the libraries are not
 * linked), never a silent direct call. The CUDA runtime stays linked
 * statically: it maps nothing until its first call (cuda_device.cu).
 *
 * Include this instead of <cudnn.h> and <cublasLt.h>, in .cu files only.
 */
#ifndef INFD_BACKENDS_CUDA_LIBS_H
#define INFD_BACKENDS_CUDA_LIBS_H

#include <stddef.h>

#include <cublasLt.h>
#include <cudnn.h>

/* The sonames loaded (the major versions infd is built for). */
#define INFD_CUDNN_SONAME    "libcudnn.so.9"
#define INFD_CUBLASLT_SONAME "libcublasLt.so.13"

#define INFD_CUDNN_FUNCTIONS(X)                     \
    X(cudnnBackendCreateDescriptor)                 \
    X(cudnnBackendDestroyDescriptor)                \
    X(cudnnBackendExecute)                          \
    X(cudnnBackendFinalize)                         \
    X(cudnnBackendGetAttribute)                     \
    X(cudnnBackendSetAttribute)                     \
    X(cudnnConvolutionBackwardData)                 \
    X(cudnnConvolutionBiasActivationForward)        \
    X(cudnnConvolutionForward)                      \
    X(cudnnCreate)                                  \
    X(cudnnCreateActivationDescriptor)              \
    X(cudnnCreateConvolutionDescriptor)             \
    X(cudnnCreateFilterDescriptor)                  \
    X(cudnnCreateTensorDescriptor)                  \
    X(cudnnDestroy)                                 \
    X(cudnnDestroyActivationDescriptor)             \
    X(cudnnDestroyConvolutionDescriptor)            \
    X(cudnnDestroyFilterDescriptor)                 \
    X(cudnnDestroyTensorDescriptor)                 \
    X(cudnnGetConvolution2dForwardOutputDim)        \
    X(cudnnGetConvolutionBackwardDataAlgorithm_v7)  \
    X(cudnnGetConvolutionBackwardDataWorkspaceSize) \
    X(cudnnGetConvolutionForwardAlgorithm_v7)       \
    X(cudnnGetConvolutionForwardWorkspaceSize)      \
    X(cudnnGetErrorString)                          \
    X(cudnnGetLastErrorString)                      \
    X(cudnnGetProperty)                             \
    X(cudnnGetVersion)                              \
    X(cudnnSetActivationDescriptor)                 \
    X(cudnnSetConvolution2dDescriptor)              \
    X(cudnnSetConvolutionGroupCount)                \
    X(cudnnSetConvolutionMathType)                  \
    X(cudnnSetFilter4dDescriptor)                   \
    X(cudnnSetStream)                               \
    X(cudnnSetTensor4dDescriptor)

#define INFD_CUBLASLT_FUNCTIONS(X)          \
    X(cublasLtCreate)                       \
    X(cublasLtDestroy)                      \
    X(cublasLtGetProperty)                  \
    X(cublasLtMatmul)                       \
    X(cublasLtMatmulAlgoCheck)              \
    X(cublasLtMatmulAlgoGetHeuristic)       \
    X(cublasLtMatmulDescCreate)             \
    X(cublasLtMatmulDescDestroy)            \
    X(cublasLtMatmulDescSetAttribute)       \
    X(cublasLtMatmulPreferenceCreate)       \
    X(cublasLtMatmulPreferenceDestroy)      \
    X(cublasLtMatmulPreferenceSetAttribute) \
    X(cublasLtMatrixLayoutCreate)           \
    X(cublasLtMatrixLayoutDestroy)          \
    X(cublasLtMatrixLayoutSetAttribute)

typedef struct infd_cuda_lib_table {
#define INFD_CUDA_LIB_SLOT(f) decltype(&::f) p_##f;
    INFD_CUDNN_FUNCTIONS(INFD_CUDA_LIB_SLOT)
    INFD_CUBLASLT_FUNCTIONS(INFD_CUDA_LIB_SLOT)
#undef INFD_CUDA_LIB_SLOT
} infd_cuda_lib_table;

/* Filled by infd_cuda_libs_load; read-only once it returned 0. */
extern infd_cuda_lib_table infd_cuda_libs;

/* Loads both libraries and every function of the lists, once per process
 * (later calls return the first outcome; thread-safe). 0 on success; -1
 * with the reason in `why` ("cannot load libcudnn.so.9: ...: cuDNN 9 is
 * needed for --device cuda"), which later calls repeat. */
extern "C" int infd_cuda_libs_load(char *why, size_t n);

/* From here on, calls go through the table. */
#define INFD_CUDA_LIB_CALL(f)         (*infd_cuda_libs.p_##f)
#define cudnnBackendCreateDescriptor  INFD_CUDA_LIB_CALL(cudnnBackendCreateDescriptor)
#define cudnnBackendDestroyDescriptor INFD_CUDA_LIB_CALL(cudnnBackendDestroyDescriptor)
#define cudnnBackendExecute           INFD_CUDA_LIB_CALL(cudnnBackendExecute)
#define cudnnBackendFinalize          INFD_CUDA_LIB_CALL(cudnnBackendFinalize)
#define cudnnBackendGetAttribute      INFD_CUDA_LIB_CALL(cudnnBackendGetAttribute)
#define cudnnBackendSetAttribute      INFD_CUDA_LIB_CALL(cudnnBackendSetAttribute)
#define cudnnConvolutionBackwardData  INFD_CUDA_LIB_CALL(cudnnConvolutionBackwardData)
#define cudnnConvolutionBiasActivationForward \
    INFD_CUDA_LIB_CALL(cudnnConvolutionBiasActivationForward)
#define cudnnConvolutionForward           INFD_CUDA_LIB_CALL(cudnnConvolutionForward)
#define cudnnCreate                       INFD_CUDA_LIB_CALL(cudnnCreate)
#define cudnnCreateActivationDescriptor   INFD_CUDA_LIB_CALL(cudnnCreateActivationDescriptor)
#define cudnnCreateConvolutionDescriptor  INFD_CUDA_LIB_CALL(cudnnCreateConvolutionDescriptor)
#define cudnnCreateFilterDescriptor       INFD_CUDA_LIB_CALL(cudnnCreateFilterDescriptor)
#define cudnnCreateTensorDescriptor       INFD_CUDA_LIB_CALL(cudnnCreateTensorDescriptor)
#define cudnnDestroy                      INFD_CUDA_LIB_CALL(cudnnDestroy)
#define cudnnDestroyActivationDescriptor  INFD_CUDA_LIB_CALL(cudnnDestroyActivationDescriptor)
#define cudnnDestroyConvolutionDescriptor INFD_CUDA_LIB_CALL(cudnnDestroyConvolutionDescriptor)
#define cudnnDestroyFilterDescriptor      INFD_CUDA_LIB_CALL(cudnnDestroyFilterDescriptor)
#define cudnnDestroyTensorDescriptor      INFD_CUDA_LIB_CALL(cudnnDestroyTensorDescriptor)
#define cudnnGetConvolution2dForwardOutputDim \
    INFD_CUDA_LIB_CALL(cudnnGetConvolution2dForwardOutputDim)
#define cudnnGetConvolutionBackwardDataAlgorithm_v7 \
    INFD_CUDA_LIB_CALL(cudnnGetConvolutionBackwardDataAlgorithm_v7)
#define cudnnGetConvolutionBackwardDataWorkspaceSize \
    INFD_CUDA_LIB_CALL(cudnnGetConvolutionBackwardDataWorkspaceSize)
#define cudnnGetConvolutionForwardAlgorithm_v7 \
    INFD_CUDA_LIB_CALL(cudnnGetConvolutionForwardAlgorithm_v7)
#define cudnnGetConvolutionForwardWorkspaceSize \
    INFD_CUDA_LIB_CALL(cudnnGetConvolutionForwardWorkspaceSize)
#define cudnnGetErrorString             INFD_CUDA_LIB_CALL(cudnnGetErrorString)
#define cudnnGetLastErrorString         INFD_CUDA_LIB_CALL(cudnnGetLastErrorString)
#define cudnnGetProperty                INFD_CUDA_LIB_CALL(cudnnGetProperty)
#define cudnnGetVersion                 INFD_CUDA_LIB_CALL(cudnnGetVersion)
#define cudnnSetActivationDescriptor    INFD_CUDA_LIB_CALL(cudnnSetActivationDescriptor)
#define cudnnSetConvolution2dDescriptor INFD_CUDA_LIB_CALL(cudnnSetConvolution2dDescriptor)
#define cudnnSetConvolutionGroupCount   INFD_CUDA_LIB_CALL(cudnnSetConvolutionGroupCount)
#define cudnnSetConvolutionMathType     INFD_CUDA_LIB_CALL(cudnnSetConvolutionMathType)
#define cudnnSetFilter4dDescriptor      INFD_CUDA_LIB_CALL(cudnnSetFilter4dDescriptor)
#define cudnnSetStream                  INFD_CUDA_LIB_CALL(cudnnSetStream)
#define cudnnSetTensor4dDescriptor      INFD_CUDA_LIB_CALL(cudnnSetTensor4dDescriptor)
#define cublasLtCreate                  INFD_CUDA_LIB_CALL(cublasLtCreate)
#define cublasLtDestroy                 INFD_CUDA_LIB_CALL(cublasLtDestroy)
#define cublasLtGetProperty             INFD_CUDA_LIB_CALL(cublasLtGetProperty)
#define cublasLtMatmul                  INFD_CUDA_LIB_CALL(cublasLtMatmul)
#define cublasLtMatmulAlgoCheck         INFD_CUDA_LIB_CALL(cublasLtMatmulAlgoCheck)
#define cublasLtMatmulAlgoGetHeuristic  INFD_CUDA_LIB_CALL(cublasLtMatmulAlgoGetHeuristic)
#define cublasLtMatmulDescCreate        INFD_CUDA_LIB_CALL(cublasLtMatmulDescCreate)
#define cublasLtMatmulDescDestroy       INFD_CUDA_LIB_CALL(cublasLtMatmulDescDestroy)
#define cublasLtMatmulDescSetAttribute  INFD_CUDA_LIB_CALL(cublasLtMatmulDescSetAttribute)
#define cublasLtMatmulPreferenceCreate  INFD_CUDA_LIB_CALL(cublasLtMatmulPreferenceCreate)
#define cublasLtMatmulPreferenceDestroy INFD_CUDA_LIB_CALL(cublasLtMatmulPreferenceDestroy)
#define cublasLtMatmulPreferenceSetAttribute \
    INFD_CUDA_LIB_CALL(cublasLtMatmulPreferenceSetAttribute)
#define cublasLtMatrixLayoutCreate       INFD_CUDA_LIB_CALL(cublasLtMatrixLayoutCreate)
#define cublasLtMatrixLayoutDestroy      INFD_CUDA_LIB_CALL(cublasLtMatrixLayoutDestroy)
#define cublasLtMatrixLayoutSetAttribute INFD_CUDA_LIB_CALL(cublasLtMatrixLayoutSetAttribute)

#endif /* INFD_BACKENDS_CUDA_LIBS_H */
