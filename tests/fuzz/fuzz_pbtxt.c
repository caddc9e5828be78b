/*
 * fuzz_pbtxt.c - libFuzzer target for config.pbtxt: the text format parser
 * into a ModelConfig, then both writers.
 *
 * Every input must parse or fail with a message. What parses must write as
 * JSON, write as text, and that text must parse back to a message with the
 * same JSON (the printer and the parser agree on the grammar). Seeds are
 * Triton configs from make_seeds.py (build/fuzz/seeds-pbtxt).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/alloc.h"
#include "model_config.pb-c.h"
#include "runtime/pbjson.h"
#include "runtime/pbtxt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const ProtobufCMessageDescriptor *desc = &inference__model_config__descriptor;
    ProtobufCMessage *m = NULL, *back = NULL;
    char *json = NULL, *json_back = NULL, *text = NULL;
    size_t n_json = 0, n_json_back = 0, n_text = 0;
    infd_error err = { 0 };

    if (infd_pbtxt_parse((const char *)data, size, desc, "fuzz.pbtxt", &m, &err) !=
        INFD_STATUS_OK) {
        if (err.msg[0] == '\0')
            __builtin_trap(); /* every failure must say why */
        return 0;
    }
    if (infd_pbjson_write(m, &json, &n_json, &err) != INFD_STATUS_OK)
        __builtin_trap(); /* parsed strings are valid UTF-8, nesting is shallow */
    if (infd_pbtxt_write(m, &text, &n_text, &err) != INFD_STATUS_OK)
        __builtin_trap();
    if (infd_pbtxt_parse(text, n_text, desc, "printed.pbtxt", &back, &err) != INFD_STATUS_OK)
        __builtin_trap(); /* the printer wrote something the parser rejects */
    if (infd_pbjson_write(back, &json_back, &n_json_back, &err) != INFD_STATUS_OK)
        __builtin_trap();
    if (n_json != n_json_back || memcmp(json, json_back, n_json) != 0)
        __builtin_trap(); /* the text round trip changed the message */

    infd_free(json);
    infd_free(json_back);
    infd_free(text);
    infd_pbtxt_free(back);
    infd_pbtxt_free(m);
    return 0;
}
