/*
 * fuzz_asr_json.c - libFuzzer target for the speech app's JSON readers
 * (src/apps/asr/contract.h): each input is read as an onnx-asr config.json
 * and checked as a model contract against the facts of the tiny test model
 * (scripts/gen_asr_models.py, onnx-asr layout).
 *
 * Every input must be accepted or refused with a message; nothing else.
 * Seeds: tests/fuzz/seeds-asr-json (a contract `infd asr --write-contract`
 * wrote for that model, and a config.json).
 */
#include <stdlib.h>
#include <string.h>

#include "apps/asr/contract.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static asr_contract_io io(const char *name, infd_dtype dtype, int rank, int64_t d0, int64_t d1,
                          int64_t d2, int64_t d3)
{
    asr_contract_io t;
    memset(&t, 0, sizeof(t));
    strcpy(t.name, name);
    t.dtype = dtype;
    t.rank = rank;
    t.dims[0] = d0, t.dims[1] = d1, t.dims[2] = d2, t.dims[3] = d3;
    return t;
}

/* The tiny model's contract, as recognizer.c records it. */
static void tiny_facts(asr_contract *c)
{
    memset(c, 0, sizeof(*c));
    c->model = "tiny-tdt";
    c->layout = "onnx-asr";
    c->features = asr_feature_params_nemo(128);
    c->subsampling = 8;
    c->d_model = 64;
    c->pred_layers = 2;
    c->pred_hidden = 64;
    c->tdt = (asr_tdt_config){
        .vocab = 32, .durations = { 0, 1, 2, 3, 4 }, .n_durations = 5, .max_symbols = 10
    };
    c->cache_kind = "none";
    asr_contract_net *e = &c->nets[0], *d = &c->nets[1];
    c->n_nets = 2;
    e->role = "encoder";
    e->file = "encoder-model.onnx";
    e->in[0] = io("audio_signal", INFD_DTYPE_FP32, 3, 1, 128, -1, 0);
    e->in[1] = io("length", INFD_DTYPE_INT64, 1, 1, 0, 0, 0);
    e->out[0] = io("outputs", INFD_DTYPE_FP32, 3, 1, 64, -1, 0);
    e->out[1] = io("encoded_lengths", INFD_DTYPE_INT64, 1, 1, 0, 0, 0);
    e->n_in = e->n_out = 2;
    d->role = "decoder_joint";
    d->file = "decoder_joint-model.onnx";
    d->in[0] = io("encoder_outputs", INFD_DTYPE_FP32, 3, 1, 64, 1, 0);
    d->in[1] = io("targets", INFD_DTYPE_INT32, 2, 1, 1, 0, 0);
    d->in[2] = io("target_length", INFD_DTYPE_INT32, 1, 1, 0, 0, 0);
    d->in[3] = io("input_states_1", INFD_DTYPE_FP32, 3, 2, 1, 64, 0);
    d->in[4] = io("input_states_2", INFD_DTYPE_FP32, 3, 2, 1, 64, 0);
    d->out[0] = io("outputs", INFD_DTYPE_FP32, 4, 1, 1, 1, 38);
    d->out[1] = io("prednet_lengths", INFD_DTYPE_INT32, 1, 1, 0, 0, 0);
    d->out[2] = io("output_states_1", INFD_DTYPE_FP32, 3, 2, 1, 64, 0);
    d->out[3] = io("output_states_2", INFD_DTYPE_FP32, 3, 2, 1, 64, 0);
    d->n_in = 5;
    d->n_out = 4;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static asr_contract c;
    static bool ready;
    if (!ready) {
        tiny_facts(&c);
        ready = true;
    }
    infd_error err = { 0 };
    int n_mels = 0, sub = 0, max = 0;
    if (asr_config_parse((const char *)data, size, "config.json", &n_mels, &sub, &max, &err) ==
        INFD_STATUS_OK) {
        if (n_mels < 1 || n_mels > 512 || sub < 1 || max < 1)
            abort(); /* accepted values are in range */
    } else if (!err.msg[0]) {
        abort(); /* a refusal says why */
    }
    err.msg[0] = '\0';
    if (asr_contract_check(&c, (const char *)data, size, "x.contract.json", &err) !=
            INFD_STATUS_OK &&
        !err.msg[0])
        abort();
    return 0;
}
