/*
 * fuzz_image.c - libFuzzer target for the built-in image_decode processor
 * (src/plugins/image.c): any bytes as an encoded image must decode (JPEG by
 * libjpeg-turbo, PNG by libspng), be placed into the model's input (the
 * detector's letterbox, or the general path: a crop to NCHW BGR), or fail
 * with a message, never crash or read out of bounds. One instance's buffers
 * are reused across inputs, as a model instance reuses them.
 *
 * The processors' sources are compiled in (their functions are static).
 * Seeds: tests/fuzz/seeds-image (a 16 x 12 testsrc frame as PNG and JPEG,
 * made with ffmpeg's testsrc for this project).
 */
#include <stddef.h>
#include <stdint.h>

#include "plugins/image.c"
#include "plugins/params.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static img_state detector = { .batched = true,
                                  .width = 32,
                                  .height = 32,
                                  .crop_fraction = 1,
                                  .scale = 1.0f / 127.5f,
                                  .offset = -1.0f,
                                  .detector = true };
    static img_state general = { .batched = true,
                                 .width = 24,
                                 .height = 16,
                                 .crop = true,
                                 .crop_fraction = 0.875f,
                                 .nchw = true,
                                 .bgr = true };
    static img_inst inst;
    static float out[32 * 32 * 3];
    if (!inst.tj) {
        inst.tj = tjInitDecompress();
        for (int c = 0; c < 3; c++)
            for (int x = 0; x < 256; x++)
                general.lut[c][x] = (float)x / 255.0f - 0.5f;
    }
    img_state *state = size % 2 ? &general : &detector;
    float lb[5];
    char msg[320];
    if (one_image(state, &inst, data, size, out, lb, msg, sizeof(msg)) == INFD_STATUS_OK) {
        volatile float sink = 0;
        for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++)
            sink += out[i];
        (void)sink;
    }
    return 0;
}
