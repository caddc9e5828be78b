/*
 * recognizer.h - transcription, offline and streaming, with a Parakeet-TDT
 * model on infd's engine (docs/ASR.md). The public C ABI over it is
 * include/infd/asr.h.
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

#include <stdbool.h>
#include <stdint.h>

#include "apps/asr/tdt.h"
#include "infd/engine.h"

typedef struct asr_model asr_model;
typedef struct asr_stream asr_stream;

typedef struct asr_model_options {
    infd_device_kind device; /* INFD_DEVICE_CPU (default) or INFD_DEVICE_CUDA */
    int device_index;
    infd_precision precision; /* of every plan (engine.h; default FP32) */
    int n_threads;            /* engine threads; 0: all cores */
    int bucket_frames;        /* encoder lengths are padded to a multiple of this; 0: 256 */
    double max_seconds;       /* the longest audio encoded at once; 0: 40 (longer: in chunks) */
    /* The contract (contract.h) checked at load: NULL for the default path,
     * <parent of the model directory>/contracts/<model>.contract.json,
     * checked when it is there; a path given must be there. */
    const char *contract;
} asr_model_options;

/* A word: tokens [first, first + n) of the result, the first starting with
 * SentencePiece's word mark; its text is text[text_off, text_off + text_len). */
typedef struct asr_word {
    int64_t first, n;
    size_t text_off, text_len;
    double start, end; /* seconds: the first token's frame, the last one's frame + duration */
} asr_word;

typedef struct asr_result {
    char *text;            /* detokenised (SentencePiece's U+2581 as spaces), owned */
    asr_tdt_token *tokens; /* owned */
    int64_t n_tokens;
    asr_word *words; /* owned */
    int64_t n_words;
    double frame_seconds; /* seconds per encoder frame (hop x subsampling / rate) */
    int64_t n_frames;     /* encoder frames decoded */
    int64_t n_joint_runs; /* decoder-joint runs the decoding took */
    int64_t start_frame;  /* the segment's first frame (streams reset at endpoints) */
} asr_result;

void asr_model_options_init(asr_model_options *o);

infd_status asr_model_load(const char *dir, const asr_model_options *o, asr_model **out,
                           infd_error *err);
void asr_model_destroy(asr_model *m);

/* The sample rate the model takes (16000). */
int asr_model_sample_rate(const asr_model *m);

/* Seconds per encoder frame (0.08 for Parakeet). */
double asr_model_frame_seconds(const asr_model *m);

/* The model's contract as JSON (malloc'd: free it; NULL: out of memory), and
 * the path its file is read from. */
char *asr_model_contract_json(const asr_model *m);
const char *asr_model_contract_path(const asr_model *m);

/* The vocabulary's piece for token id (NULL outside it). */
const char *asr_model_piece(const asr_model *m, int id);

/* Transcribes n mono samples at asr_model_sample_rate: an offline stream
 * (below) given all of them. Audio that fits in one encoding (max_seconds)
 * is encoded at once; longer audio in chunks of 20 s, each encoded with
 * 10 s before and 4.96 s after it (NeMo's buffered inference), only the
 * chunk's frames decoded and the decoder's state carried (the encoder's
 * attention grows with the square of the length). */
infd_status asr_model_transcribe(asr_model *m, const float *samples, int64_t n, asr_result *out,
                                 infd_error *err);

void asr_result_fini(asr_result *r);

/*
 * Streams: one per session, all sharing the model. Buffered chunked
 * streaming (NeMo's for full-attention models such as Parakeet v2/v3):
 * audio is cut into chunks of chunk_s; a chunk is encoded inside the window
 * [left_s | chunk | right_s] (features and their normalisation over the
 * window), only its encoder frames are decoded, and the decoder's state
 * (the predictor's LSTM state, its last token, the TDT time jump) is
 * carried to the next. A chunk is ready once right_s of audio after it has
 * come, or the input has finished. The three are whole encoder frames.
 * chunk_s = 0 makes an offline stream: nothing is ready until the input
 * has finished, and then it decodes as asr_model_transcribe.
 *
 * A cache-aware encoder (sherpa-onnx layout; inputs cache_last_channel,
 * cache_last_time, cache_last_channel_len; window_size and chunk_shift in
 * its metadata) streams in its own chunks instead, chunk_s, left_s and
 * right_s unused: window k is feature frames [k x chunk_shift, + window_size)
 * (a window longer than the shift holds a pre-encode cache, as sherpa-onnx
 * feeds NeMo's exports), its unnormalised features made from the stream's
 * samples (the same values the whole audio gives), the encoder
 * reads the stream's caches and writes the next ones, and the chunk's
 * encoded frames are decoded. Exactly the tokens of the whole utterance.
 *
 * Endpoints follow sherpa-onnx's three rules, in seconds of decoded audio
 * since the segment began (asr_stream_reset begins one): trailing silence
 * (frames since the last token) >= rule1_s with no token yet; >= rule2_s
 * after a token; the segment >= rule3_s long.
 *
 * After the first chunks, accepting audio at the model's rate and decoding
 * allocate nothing (tests/unit/apps/test_asr_stream.c counts): the
 * encoder's plans for the window lengths are built on their first use, the
 * sample buffer is compacted in place, and the token buffer, which holds
 * the most tokens 30 s can give, doubles only when a segment outgrows it.
 * Decoding locks the model: streams decode one at a time.
 */
typedef struct asr_stream_options {
    double chunk_s; /* 0: offline; else >= one encoder frame (0.08 s) */
    double left_s, right_s;
    double rule1_s, rule2_s, rule3_s; /* endpoint rules; 0 turns one off */
} asr_stream_options;

/* Defaults: chunk 2 s, left 10 s, right 2 s (NeMo's), endpoint rules 2.4,
 * 1.2 and 20 s (sherpa-onnx's). */
void asr_stream_options_init(asr_stream_options *o);

/* INVALID_ARGUMENT naming the option when a length is negative, not a
 * whole number of encoder frames, or the window is longer than the model's
 * max_seconds, or an endpoint rule is negative: what asr_stream_create
 * refuses, checked without making a stream. */
infd_status asr_stream_options_check(const asr_model *m, const asr_stream_options *o,
                                     infd_error *err);

/* A stream of model m (o NULL: the defaults); asr_stream_options_check's
 * errors, or OUT_OF_MEMORY. */
infd_status asr_stream_create(asr_model *m, const asr_stream_options *o, asr_stream **out,
                              infd_error *err);
void asr_stream_destroy(asr_stream *s);

/* Appends n samples at sample_rate (resampled with libsoxr when it is not
 * the model's; it may not change within a stream). n = 0 is a no-op.
 * INVALID_ARGUMENT for a rate <= 0 or changed, a sample that is not finite
 * or beyond ASR_AUDIO_MAX_ABS, or audio after asr_stream_finish. */
infd_status asr_stream_accept(asr_stream *s, int sample_rate, const float *samples, int64_t n,
                              infd_error *err);

/* No more audio: the rest is decoded as the last chunk. */
void asr_stream_finish(asr_stream *s);

/* A chunk can be decoded. */
bool asr_stream_ready(const asr_stream *s);

/* Decodes the next ready chunk (a no-op when none is). */
infd_status asr_stream_decode(asr_stream *s, infd_error *err);

/* Decodes the next ready chunk of each of the n streams of model m that has
 * one, the windows of the same padded length encoded together (up to 64 in
 * one encoder run, its batch the next power of two; a plan per batch and
 * length, sharing the weights; their features computed on a thread per
 * core, each stream's shared frames kept), then each stream's frames
 * decoded with its own state. Cache-aware streams batch the same way, up
 * to 16, their caches gathered into the batch and scattered back. The
 * first error stops the call (chunks decoded before it stay decoded). */
infd_status asr_streams_decode(asr_model *m, asr_stream *const *streams, int n, infd_error *err);

/* The input has finished and every chunk is decoded. */
bool asr_stream_done(const asr_stream *s);

/* The segment's transcript so far (partial until asr_stream_done). */
infd_status asr_stream_result(const asr_stream *s, asr_result *out, infd_error *err);

/* The segment's tokens so far (n in *n), valid until the next decode or
 * reset. */
const asr_tdt_token *asr_stream_tokens(const asr_stream *s, int64_t *n);

/* One of the endpoint rules holds. */
bool asr_stream_endpoint(const asr_stream *s);

/* Begins a new segment: the tokens so far are dropped (the decoder keeps
 * its state and the audio goes on). */
void asr_stream_reset(asr_stream *s);

#endif /* INFD_APPS_ASR_RECOGNIZER_H */
