/*
 * fuzz_image.c - libFuzzer target for the built-in image_decode processor
 * (src/plugins/image.c): any bytes as an encoded image must decode (JPEG by
 * libjpeg-turbo, PNG by libspng), be letterboxed into the detector's input,
 * or fail with a message, never crash or read out of bounds. One instance's
 * buffers are reused across inputs, as a model instance reuses them.
 *
 * The processors' sources are compiled in (their functions are static).
 * Seeds: tests/fuzz/seeds-image (a 16 x 12 testsrc frame as PNG and JPEG,
 * made with ffmpeg's testsrc for this project).
 */
#include <stddef.h>
#include <stdint.h>

#include "plugins/blazeface.c"
#include "plugins/image.c"
#include "plugins/plugins.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static img_state state = {
        .batched = true, .size = 32, .scale = 1.0f / 127.5f, .offset = -1.0f
    };
    static img_inst inst;
    static float out[32 * 32 * 3];
    if (!inst.tj)
        inst.tj = tjInitDecompress();
    float lb[5];
    char msg[320];
    if (one_image(&state, &inst, data, size, out, lb, msg, sizeof(msg)) == INFD_STATUS_OK) {
        volatile float sink = 0;
        for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
            sink += out[i];
        (void)sink;
    }
    return 0;
}
