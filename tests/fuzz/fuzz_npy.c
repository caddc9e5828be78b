/*
 * fuzz_npy.c - libFuzzer target for the .npy reader of `infd run` and the
 * tests (src/cli/npy.c, whose source it includes to reach the stream
 * reader): any bytes must give a tensor whose every byte can be read, or
 * an error with a message; never a crash, a leak, or an allocation sized by
 * a header that promises more data than follows.
 *
 * Seeds: build/fuzz/seeds-npy, written by NumPy (tests/fuzz/make_seeds.py).
 */
#include "cli/npy.c"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink; /* every byte of a tensor read */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0; /* fmemopen takes no empty buffer */
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f)
        return 0;
    infd_tensor t;
    infd_error err;
    infd_error_clear(&err);
    if (npy_read_stream(f, "fuzz.npy", &t, &err) == INFD_STATUS_OK) {
        uint8_t sum = 0;
        for (size_t i = 0; i < t.nbytes; i++)
            sum ^= ((const uint8_t *)t.data)[i];
        sink = sum;
        if (t.nbytes > size)
            abort(); /* more data than the input held */
        infd_tensor_fini(&t);
    } else if (!err.msg[0]) {
        abort(); /* an error without a message */
    }
    return 0;
}
