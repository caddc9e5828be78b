/*
 * recognizer.h - offline transcription with a Parakeet-TDT model in the
 * onnx-asr layout, on infd's engine (docs/ASR.md).
 *
 * A model directory holds (as istupakov/onnx-asr publishes Parakeet):
 *   encoder-model.onnx      audio_signal [B, n_mels, T] f32, length [B] i64
 *                           -> outputs [B, D, T'] f32, encoded_lengths [B] i64
 *   decoder_joint-model.onnx
 *                           encoder_outputs [B, D, 1] f32, targets [B, 1] i32,
 *                           target_length [B] i32, input_states_1 and
 *                           input_states_2 [L, B, H] f32 -> outputs (the joint's
 *                           V + 1 + 5 logits last), prednet_lengths,
 *                           output_states_1, output_states_2
 *   vocab.txt               "piece id" per line, <blk> last (id V)
 *   config.json             {"model_type": "nemo-conformer-tdt",
 *                            "features_size": 128, "subsampling_factor": 8,
 *                            "max_tokens_per_step": 10 (optional)}
 * or, in the sherpa-onnx layout (detected by encoder.onnx): encoder.onnx
 * (the same I/O), decoder.onnx (the predictor: targets, target_length and
 * two states by position -> outputs [B, H, U] and two states), joiner.onnx
 * (encoder_outputs [B, D, T], decoder_outputs [B, H, U] -> V + 1 + 5
 * logits) and tokens.txt (vocab.txt's format); the mel count is the
 * encoder's declared one.
 * Every name, dtype and shape above is checked when the model loads (the
 * encoder's at its first length), and a mismatch is INVALID_ARGUMENT naming
 * the file, the tensor and what was expected.
 *
 * Audio of any length is encoded at once: the features are padded with
 * zeros to the next multiple of bucket_frames (default 256, 2.56 s) and
 * `length` says how many are real, so one encoder plan serves every length
 * of its bucket; the plans share the model's weights (engine.h,
 * infd_weights). The decoder runs the joint once per step with the
 * predictor's committed state, keeps the state it returns, and commits it
 * only when a token is emitted (tdt.h).
 */
#ifndef INFD_APPS_ASR_RECOGNIZER_H
#define INFD_APPS_ASR_RECOGNIZER_H

#include <stdint.h>

#include "apps/asr/tdt.h"
#include "infd/engine.h"

typedef struct asr_model asr_model;

typedef struct asr_model_options {
    infd_device_kind device; /* INFD_DEVICE_CPU (default) or INFD_DEVICE_CUDA */
    int device_index;
    int n_threads;      /* engine threads; 0: all cores */
    int bucket_frames;  /* encoder lengths are padded to a multiple of this; 0: 256 */
    double max_seconds; /* the longest audio encoded at once; 0: 40 (longer: in chunks) */
} asr_model_options;

typedef struct asr_result {
    char *text;            /* detokenised (SentencePiece's U+2581 as spaces), owned */
    asr_tdt_token *tokens; /* owned */
    int64_t n_tokens;
    double frame_seconds; /* seconds per encoder frame (hop x subsampling / rate) */
    int64_t n_frames;     /* encoder frames decoded */
    int64_t n_joint_runs; /* decoder-joint runs the decoding took */
} asr_result;

void asr_model_options_init(asr_model_options *o);

infd_status asr_model_load(const char *dir, const asr_model_options *o, asr_model **out,
                           infd_error *err);
void asr_model_destroy(asr_model *m);

/* The sample rate the model takes (16000). */
int asr_model_sample_rate(const asr_model *m);

/* The vocabulary's piece for token id (NULL outside it). */
const char *asr_model_piece(const asr_model *m, int id);

/* Transcribes n mono samples at asr_model_sample_rate. Audio that fits in
 * one encoding (max_seconds) is encoded at once; longer audio in chunks of
 * 20 s, each encoded with 10 s before and 4.96 s after it (NeMo's buffered
 * inference), only the chunk's frames decoded and the decoder's state
 * carried (the encoder's attention grows with the square of the length). */
infd_status asr_model_transcribe(asr_model *m, const float *samples, int64_t n, asr_result *out,
                                 infd_error *err);

void asr_result_fini(asr_result *r);

#endif /* INFD_APPS_ASR_RECOGNIZER_H */
