/*
 * cuda_vec.cuh - moving V 16-bit elements (FP16/BF16 channels) as one
 * word, for .cu files only: the word type and the widest V a channel count
 * and pointers allow.
 */
#ifndef INFD_BACKENDS_CUDA_VEC_CUH
#define INFD_BACKENDS_CUDA_VEC_CUH

#include <stdint.h>

/* V 16-bit elements moved as one word. */
template <int V> struct vec_t;
template <> struct vec_t<8> {
    typedef uint4 type;
};
template <> struct vec_t<4> {
    typedef uint2 type;
};
template <> struct vec_t<2> {
    typedef unsigned type;
};
template <> struct vec_t<1> {
    typedef unsigned short type;
};

/* The widest V (8, 4, 2, else 1) of 16-bit elements a thread can move as
 * one word: c (a channel count, or several OR-ed: a power of two divides
 * them all when it divides the OR) a multiple of V and every pointer in
 * ptrs (OR-ed) aligned to the word. */
static inline int vec_width(int64_t c, uintptr_t ptrs)
{
    for (int v = 8; v > 1; v /= 2) {
        if (c % v == 0 && ptrs % (uintptr_t)(2 * v) == 0)
            return v;
    }
    return 1;
}

#endif /* INFD_BACKENDS_CUDA_VEC_CUH */
