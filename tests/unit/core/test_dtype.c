/* Unit tests for dtypes and FP16/BF16 conversion. */
#include <math.h>

#include "infd/infd.h"
#include "test.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t f32_bits_of(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    return bits;
}

static float f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void test_sizes_and_names(void)
{
    ASSERT_EQ_U64(infd_dtype_size(INFD_DTYPE_FP32), 4);
    ASSERT_EQ_U64(infd_dtype_size(INFD_DTYPE_FP16), 2);
    ASSERT_EQ_U64(infd_dtype_size(INFD_DTYPE_BF16), 2);
    ASSERT_EQ_U64(infd_dtype_size(INFD_DTYPE_BOOL), 1);
    ASSERT_EQ_U64(infd_dtype_size(INFD_DTYPE_INT64), 8);
    ASSERT_EQ_U64(infd_dtype_size(INFD_DTYPE_BYTES), 0);
    ASSERT_EQ_U64(infd_dtype_size((infd_dtype)1000), 0);
    for (int d = 1; d < INFD_DTYPE_COUNT_; d++)
        ASSERT_EQ_INT(infd_dtype_from_name(infd_dtype_name((infd_dtype)d)), d);
    ASSERT_EQ_INT(infd_dtype_from_name("TYPE_FP32"), INFD_DTYPE_FP32);
    ASSERT_EQ_INT(infd_dtype_from_name("TYPE_STRING"), INFD_DTYPE_BYTES);
    ASSERT_EQ_INT(infd_dtype_from_name("TYPE_BYTES"), INFD_DTYPE_INVALID);
    ASSERT_EQ_INT(infd_dtype_from_name("fp32"), INFD_DTYPE_INVALID);
    ASSERT_EQ_INT(infd_dtype_from_name("INVALID"), INFD_DTYPE_INVALID);
    ASSERT_EQ_INT(infd_dtype_from_name(NULL), INFD_DTYPE_INVALID);
}

static void test_onnx_codes(void)
{
    ASSERT_EQ_INT(infd_dtype_from_onnx(1), INFD_DTYPE_FP32);
    ASSERT_EQ_INT(infd_dtype_from_onnx(7), INFD_DTYPE_INT64);
    ASSERT_EQ_INT(infd_dtype_from_onnx(9), INFD_DTYPE_BOOL);
    ASSERT_EQ_INT(infd_dtype_from_onnx(10), INFD_DTYPE_FP16);
    ASSERT_EQ_INT(infd_dtype_from_onnx(16), INFD_DTYPE_BF16);
    ASSERT_EQ_INT(infd_dtype_from_onnx(14), INFD_DTYPE_INVALID);
    ASSERT_EQ_INT(infd_dtype_from_onnx(-3), INFD_DTYPE_INVALID);
    ASSERT_EQ_INT(infd_dtype_from_onnx(99), INFD_DTYPE_INVALID);
    for (int d = 1; d < INFD_DTYPE_COUNT_; d++)
        ASSERT_EQ_INT(infd_dtype_from_onnx(infd_dtype_to_onnx((infd_dtype)d)), d);
    ASSERT_EQ_INT(infd_dtype_to_onnx(INFD_DTYPE_INVALID), 0);
}

/* Every half value converts to float and back to itself (NaNs stay NaN). */
static void test_fp16_roundtrip_exhaustive(void)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = infd_fp16_to_fp32((uint16_t)h);
        uint16_t back = infd_fp16_from_fp32(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            ASSERT_TRUE(isnan(f));
            ASSERT_TRUE((back & 0x7c00) == 0x7c00 && (back & 0x3ff));
        } else {
            ASSERT_EQ_U64(back, h);
        }
    }
}

static void test_fp16_rounding_cases(void)
{
    ASSERT_EQ_U64(infd_fp16_from_fp32(1.0f), 0x3c00);
    ASSERT_EQ_U64(infd_fp16_from_fp32(-2.0f), 0xc000);
    ASSERT_EQ_U64(infd_fp16_from_fp32(65504.0f), 0x7bff);
    ASSERT_EQ_U64(infd_fp16_from_fp32(65519.0f), 0x7bff); /* below the halfway point */
    ASSERT_EQ_U64(infd_fp16_from_fp32(65520.0f), 0x7c00); /* halfway to 2^16 rounds to Inf */
    ASSERT_EQ_U64(infd_fp16_from_fp32(1e9f), 0x7c00);
    ASSERT_EQ_U64(infd_fp16_from_fp32(-INFINITY), 0xfc00);
    ASSERT_EQ_U64(infd_fp16_from_fp32(ldexpf(1.0f, -24)), 0x0001); /* smallest subnormal */
    ASSERT_EQ_U64(infd_fp16_from_fp32(ldexpf(1.0f, -25)), 0x0000); /* tie to even: 0 */
    ASSERT_EQ_U64(infd_fp16_from_fp32(ldexpf(1.5f, -25)), 0x0001);
    ASSERT_EQ_U64(infd_fp16_from_fp32(ldexpf(3.0f, -25)), 0x0002); /* 1.5 ulp: tie to even 2 */
    ASSERT_EQ_U64(infd_fp16_from_fp32(ldexpf(1.0f, -14)), 0x0400); /* smallest normal */
    ASSERT_EQ_U64(infd_fp16_from_fp32(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie: even */
    ASSERT_EQ_U64(infd_fp16_from_fp32(1.0f + ldexpf(3.0f, -11)), 0x3c02); /* tie: even (up) */
    ASSERT_EQ_U64(infd_fp16_from_fp32(-0.0f), 0x8000);
    ASSERT_TRUE(isnan(infd_fp16_to_fp32(infd_fp16_from_fp32(NAN))));
}

/* float -> half agrees with the compiler's _Float16 conversion (libgcc,
 * correctly rounded) on random bit patterns. */
static void test_fp16_matches_compiler(void)
{
#ifdef __FLT16_MAX__
    for (int i = 0; i < 2000000; i++) {
        uint32_t bits = (uint32_t)rng_next();
        /* Bias toward the half range so most cases are not just 0 or Inf. */
        if (i & 1)
            bits = (bits & 0x80000000u) | (bits & 0x07ffffffu) | 0x30000000u;
        float f = f32(bits);
        if (isnan(f))
            continue;
        _Float16 ref = (_Float16)f;
        uint16_t ref_bits;
        memcpy(&ref_bits, &ref, 2);
        uint16_t got = infd_fp16_from_fp32(f);
        if (got != ref_bits)
            TEST_FAIL_("fp16(%a): 0x%04x vs compiler 0x%04x", (double)f, got, ref_bits);
    }
#else
    printf("    skipped: compiler has no _Float16\n");
#endif
}

static void test_bf16(void)
{
    ASSERT_EQ_U64(infd_bf16_from_fp32(1.0f), 0x3f80);
    ASSERT_EQ_U64(infd_bf16_from_fp32(1.0f + ldexpf(1.0f, -8)), 0x3f80); /* tie: even */
    ASSERT_EQ_U64(infd_bf16_from_fp32(1.0f + ldexpf(3.0f, -8)), 0x3f82); /* tie: even (up) */
    ASSERT_EQ_U64(infd_bf16_from_fp32(1.0f + ldexpf(1.0f, -7)), 0x3f81);
    ASSERT_EQ_U64(infd_bf16_from_fp32(INFINITY), 0x7f80);
    ASSERT_EQ_U64(infd_bf16_from_fp32(3.4e38f), 0x7f80); /* rounds past the largest bf16 */
    ASSERT_TRUE(isnan(infd_bf16_to_fp32(infd_bf16_from_fp32(NAN))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = infd_bf16_to_fp32((uint16_t)h);
        if (isnan(f))
            continue;
        ASSERT_EQ_U64(infd_bf16_from_fp32(f), h);
    }
    /* Against a direct definition of round-to-nearest-even on random floats. */
    for (int i = 0; i < 1000000; i++) {
        float f = f32((uint32_t)rng_next());
        if (isnan(f))
            continue;
        uint16_t got = infd_bf16_from_fp32(f);
        float lo = infd_bf16_to_fp32(got);
        /* The neighbours of the result must be no closer to f. */
        double err = fabs((double)lo - (double)f);
        float up = infd_bf16_to_fp32((uint16_t)(got + 1));
        float dn = infd_bf16_to_fp32((uint16_t)(got - 1));
        if (isinf(lo))
            continue;
        /* Neighbours past the ends of the encoding wrap to NaN: skip them. */
        if (!isnan(up))
            ASSERT_LE_DBL(err, fabs((double)up - (double)f));
        if (!isnan(dn))
            ASSERT_LE_DBL(err, fabs((double)dn - (double)f));
    }
}

static void test_array_forms(void)
{
    float src[5] = { 0.5f, -1.25f, 1024.0f, 0.0f, 3.0f };
    uint16_t h[5], b[5];
    float back[5];
    infd_fp32_to_fp16_n(h, src, 5);
    infd_fp16_to_fp32_n(back, h, 5);
    for (int i = 0; i < 5; i++)
        ASSERT_TRUE(back[i] == src[i]);
    infd_fp32_to_bf16_n(b, src, 5);
    infd_bf16_to_fp32_n(back, b, 5);
    for (int i = 0; i < 5; i++)
        ASSERT_TRUE(back[i] == src[i]);
}

/* The FP16 array forms (F16C on CPUs that have it) give the scalar forms'
 * bits: FP32 -> FP16 over a sweep of every FP32 bit pattern (a stride
 * prime to the mantissa's steps, so ties, subnormals, overflow, Inf and
 * NaN are all visited) with lengths that leave a scalar tail, and
 * FP16 -> FP32 over all 65536 halves. */
static void test_array_forms_match_scalar(void)
{
    enum { N = 4096 + 5 };
    static float f[N];
    static uint16_t h[N];
    uint32_t bits = 0;
    for (int round = 0; round < 256; round++) {
        for (int i = 0; i < N; i++, bits += 4093u)
            f[i] = f32(bits);
        /* A NaN's payload is kept only in its top bits: compare bits. */
        infd_fp32_to_fp16_n(h, f, N - (size_t)(round % 8));
        for (int i = 0; i < N - round % 8; i++) {
            if (h[i] != infd_fp16_from_fp32(f[i]))
                ASSERT_EQ_U64(h[i], infd_fp16_from_fp32(f[i]));
        }
    }
    static uint16_t all[65536];
    static float out[65536];
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    infd_fp16_to_fp32_n(out, all, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float want = infd_fp16_to_fp32((uint16_t)i);
        if (memcmp(&out[i], &want, 4) != 0)
            ASSERT_EQ_U64(f32_bits_of(out[i]), f32_bits_of(want));
    }
}

TEST_MAIN(test_sizes_and_names, test_onnx_codes, test_fp16_roundtrip_exhaustive,
          test_fp16_rounding_cases, test_fp16_matches_compiler, test_bf16, test_array_forms,
          test_array_forms_match_scalar)
