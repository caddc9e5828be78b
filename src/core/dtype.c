/*
 * dtype.c - element type names, sizes, ONNX codes, and FP16/BF16 conversion.
 *
 * The half conversions are written out in integer arithmetic rather than
 * with F16C intrinsics so that they behave the same on every host and in
 * every build (the engine's kernels use vector forms where they need speed);
 * each is exact to IEEE 754 round-to-nearest-even, checked exhaustively over
 * all 65536 half values in tests/unit/core/test_dtype.c.
 *
 * The FP16 array forms use F16C where the CPU has it (x86-64, checked at
 * run time): the same IEEE conversion, bit for bit (test_dtype.c compares
 * them over a sweep of all FP32 bit patterns), about 30x faster than the
 * branchy scalar form on random data. A GPU plan converts every weight
 * through them (25M for ResNet-50), which is load time (issue #6).
 */
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define INFD_HAVE_F16C_PATH 1
#endif

#include "core/common.h"

static const char *const dtype_names[] = {
#define NAME_(name, str, size) str,
    INFD_DTYPE_MAP(NAME_)
#undef NAME_
};

static const uint8_t dtype_sizes[] = {
#define SIZE_(name, str, size) size,
    INFD_DTYPE_MAP(SIZE_)
#undef SIZE_
};

size_t infd_dtype_size(infd_dtype dtype)
{
    if ((unsigned)dtype >= INFD_DTYPE_COUNT_)
        return 0;
    return dtype_sizes[dtype];
}

const char *infd_dtype_name(infd_dtype dtype)
{
    if ((unsigned)dtype >= INFD_DTYPE_COUNT_)
        return "INVALID";
    return dtype_names[dtype];
}

infd_dtype infd_dtype_from_name(const char *name)
{
    if (!name)
        return INFD_DTYPE_INVALID;
    if (strncmp(name, "TYPE_", 5) == 0) {
        name += 5;
        /* Triton's config calls BYTES TYPE_STRING. */
        if (strcmp(name, "STRING") == 0)
            return INFD_DTYPE_BYTES;
        if (strcmp(name, "BYTES") == 0)
            return INFD_DTYPE_INVALID;
    }
    for (int i = 1; i < INFD_DTYPE_COUNT_; i++) {
        if (strcmp(name, dtype_names[i]) == 0)
            return (infd_dtype)i;
    }
    return INFD_DTYPE_INVALID;
}

/* ONNX TensorProto.DataType codes, indexed by code. */
static const infd_dtype onnx_to_dtype[] = {
    [0] = INFD_DTYPE_INVALID, /* UNDEFINED */
    [1] = INFD_DTYPE_FP32,     [2] = INFD_DTYPE_UINT8,    [3] = INFD_DTYPE_INT8,
    [4] = INFD_DTYPE_UINT16,   [5] = INFD_DTYPE_INT16,    [6] = INFD_DTYPE_INT32,
    [7] = INFD_DTYPE_INT64,    [8] = INFD_DTYPE_BYTES,    [9] = INFD_DTYPE_BOOL,
    [10] = INFD_DTYPE_FP16,    [11] = INFD_DTYPE_FP64,    [12] = INFD_DTYPE_UINT32,
    [13] = INFD_DTYPE_UINT64,  [14] = INFD_DTYPE_INVALID, /* COMPLEX64 */
    [15] = INFD_DTYPE_INVALID,                            /* COMPLEX128 */
    [16] = INFD_DTYPE_BF16,
};

infd_dtype infd_dtype_from_onnx(int32_t onnx_type)
{
    if (onnx_type < 0 || (size_t)onnx_type >= INFD_ARRAY_SIZE(onnx_to_dtype))
        return INFD_DTYPE_INVALID;
    return onnx_to_dtype[onnx_type];
}

int32_t infd_dtype_to_onnx(infd_dtype dtype)
{
    for (size_t i = 1; i < INFD_ARRAY_SIZE(onnx_to_dtype); i++) {
        if (onnx_to_dtype[i] == dtype && dtype != INFD_DTYPE_INVALID)
            return (int32_t)i;
    }
    return 0;
}

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static float bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t infd_fp16_from_fp32(float value)
{
    uint32_t x = f32_bits(value);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;

    if (exp == 0xffu) /* Inf stays Inf; NaN keeps its top payload bits and is made quiet. */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));

    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* Half subnormal: value = m * 2^-24. Below 2^-25 everything rounds to zero. */
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t h = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u)))
            h++; /* a carry into bit 10 gives the smallest normal, which is right */
        return (uint16_t)(sign | h);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry may reach the exponent and make Inf: that is the rounding */
    return (uint16_t)h;
}

float infd_fp16_to_fp32(uint16_t bits)
{
    uint32_t sign = (uint32_t)(bits & 0x8000u) << 16;
    uint32_t exp = (bits >> 10) & 0x1fu;
    uint32_t mant = bits & 0x3ffu;

    if (exp == 0) {
        if (mant == 0)
            return bits_f32(sign);
        uint32_t e = 113; /* 127 - 15 + 1: the exponent of 2^-14 */
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    if (exp == 31) /* Inf; a NaN keeps its payload and is made quiet, as F16C does */
        return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t infd_bf16_from_fp32(float value)
{
    uint32_t x = f32_bits(value);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN, sign kept */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float infd_bf16_to_fp32(uint16_t bits)
{
    return bits_f32((uint32_t)bits << 16);
}

#ifdef INFD_HAVE_F16C_PATH
/* CPUID leaf 1: AVX and F16C, and the OS saving YMM state (OSXSAVE, then
 * XCR0 bits 1-2). Asked directly: clang 14's __builtin_cpu_supports does
 * not know "f16c". */
static bool have_f16c(void)
{
    static _Atomic int known; /* 0: not asked yet, 1: no, 2: yes; threads may both ask */
    if (!atomic_load_explicit(&known, memory_order_relaxed)) {
        unsigned a, b, c, d;
        bool ok = false;
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27)) && (c & (1u << 28)) &&
            (c & (1u << 29))) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            ok = (lo & 6u) == 6u;
        }
        atomic_store_explicit(&known, ok ? 2 : 1, memory_order_relaxed);
    }
    return atomic_load_explicit(&known, memory_order_relaxed) == 2;
}

/* Eight at a time; the tail through the scalar form. */
__attribute__((target("avx,f16c"))) static size_t fp32_to_fp16_f16c(uint16_t *dst, const float *src,
                                                                    size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
    return i;
}

__attribute__((target("avx,f16c"))) static size_t fp16_to_fp32_f16c(float *dst, const uint16_t *src,
                                                                    size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    return i;
}
#endif

void infd_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
#ifdef INFD_HAVE_F16C_PATH
    if (n >= 8 && have_f16c())
        i = fp32_to_fp16_f16c(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = infd_fp16_from_fp32(src[i]);
}

void infd_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
#ifdef INFD_HAVE_F16C_PATH
    if (n >= 8 && have_f16c())
        i = fp16_to_fp32_f16c(dst, src, n);
#endif
    for (; i < n; i++)
        dst[i] = infd_fp16_to_fp32(src[i]);
}

void infd_fp32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = infd_bf16_from_fp32(src[i]);
}

void infd_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = infd_bf16_to_fp32(src[i]);
}
