/*
 * contract.h - a speech model's contract (docs/ASR.md, "The contract"): the
 * facts the runtime relies on, written as JSON by `infd asr MODEL_DIR
 * --write-contract` and checked whenever the model loads and its contract
 * file is there (`<parent of MODEL_DIR>/contracts/<model>.contract.json`,
 * the seed's contracts/<model>.contract.json, or a path given).
 *
 * A contract holds, for contract "infd-asr/1":
 *   - the model's name and export layout;
 *   - the features: sample rate, n_fft, window, hop, mel count, pre-emphasis,
 *     mel range, log guard, normalisation;
 *   - per network file: each input's and output's name, dtype and shape as
 *     the runtime plans them at batch 1 ("?" for the time dims it chooses);
 *   - the encoder's subsampling and width, the predictor's layers and width;
 *   - the TDT head: vocabulary size, blank id, durations, max symbols a step;
 *   - the cache semantics: "kind" "none" (buffered streaming) or
 *     "cache_aware" with the window_size and chunk_shift in feature frames
 *     (the caches' shapes are the encoder's I/O).
 * The model as loaded must match it field for field; the first difference
 * is INVALID_ARGUMENT naming the contract file, the field (with the
 * tensor's name) and both values. Fields the contract lacks, or has and the
 * model lacks, are differences too.
 */
#ifndef INFD_APPS_ASR_CONTRACT_H
#define INFD_APPS_ASR_CONTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "apps/asr/features.h"
#include "apps/asr/tdt.h"
#include "infd/engine.h"

#define ASR_CONTRACT_MAX_IO 12
#define ASR_CONTRACT_NAME   "infd-asr/1"

typedef struct asr_contract_io {
    char name[128];
    infd_dtype dtype;
    int rank;
    int64_t dims[INFD_MAX_RANK]; /* -1: chosen at run time ("?") */
} asr_contract_io;

typedef struct asr_contract_net {
    const char *role; /* "encoder", "decoder_joint", "decoder", "joiner" */
    const char *file;
    asr_contract_io in[ASR_CONTRACT_MAX_IO], out[ASR_CONTRACT_MAX_IO];
    int n_in, n_out;
} asr_contract_net;

typedef struct asr_contract {
    const char *model;  /* the model directory's name */
    const char *layout; /* "onnx-asr" or "sherpa-onnx" */
    asr_feature_params features;
    int subsampling;
    int64_t d_model, pred_layers, pred_hidden;
    asr_tdt_config tdt;
    const char *cache_kind; /* "none" or "cache_aware" */
    int64_t window, shift;  /* cache-aware: feature frames a chunk takes and moves on */
    asr_contract_net nets[3];
    int n_nets;
} asr_contract;

/* Records plan p's inputs and outputs in net (the caller then marks the
 * dims it chooses at run time with -1). */
void asr_contract_record(asr_contract_net *net, const char *role, const char *file,
                         const infd_plan *p);

/* The contract as a JSON document (malloc'd: free it; NUL-terminated), or NULL
 * when out of memory. */
char *asr_contract_json(const asr_contract *c);

/* Checks c against the JSON document text[0, n) read from `path` (named in
 * messages): OK when they match, else INVALID_ARGUMENT with the first
 * difference. */
infd_status asr_contract_check(const asr_contract *c, const char *text, size_t n, const char *path,
                               infd_error *err);

/* The onnx-asr layout's config.json, text[0, n) read from `path`:
 * {"model_type": "nemo-conformer-tdt", "features_size": N,
 * "subsampling_factor": 8, "max_tokens_per_step": 10} (the last two
 * optional). INVALID_ARGUMENT naming the file and the field otherwise. */
infd_status asr_config_parse(const char *text, size_t n, const char *path, int *n_mels,
                             int *subsampling, int *max_symbols, infd_error *err);

#endif /* INFD_APPS_ASR_CONTRACT_H */
