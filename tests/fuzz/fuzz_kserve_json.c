/*
 * fuzz_kserve_json.c - libFuzzer target for the KServe v2 inference-header
 * decoder (src/frontends/http/kserve_json.c): any bytes must decode or fail
 * with a message, never crash, leak or read out of bounds. One request
 * object is reused across inputs, as the HTTP frontend reuses them.
 *
 * The decoder's source is compiled in, so the target links against libinfd
 * alone (yajl comes with it).
 */
#include <stddef.h>
#include <stdint.h>

#include "frontends/http/kserve_json.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static kserve_request req;
    infd_error err = { 0 };
    if (kserve_request_parse(&req, (const char *)data, size, &err) == INFD_STATUS_OK) {
        /* Touch every decoded byte so a bad length shows up under ASan. */
        volatile uint8_t sink = 0;
        for (int i = 0; i < req.n_inputs; i++) {
            const uint8_t *p = req.inputs[i].data;
            for (size_t k = 0; p && k < req.inputs[i].nbytes; k++)
                sink ^= p[k];
        }
        (void)sink;
    }
    return 0;
}
