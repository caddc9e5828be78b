/*
 * infd/asr.h - streaming speech recognition with Parakeet-TDT models on
 * infd's engine: the C ABI (docs/ASR.md).
 *
 * Shaped like sherpa-onnx's online API: one recognizer per model, shared by
 * any number of streams, one per session or client.
 *
 *   infd_asr_config c;
 *   infd_asr_config_init(&c);
 *   c.model_dir = "models/parakeet";
 *   infd_asr_recognizer *rec;
 *   infd_asr_recognizer_create(&c, &rec, &err);
 *   infd_asr_stream *s;
 *   infd_asr_stream_create(rec, &s, &err);
 *   while (audio) {                       // any chunk size, any sample rate
 *       infd_asr_accept_waveform(s, 16000, samples, n, &err);
 *       while (infd_asr_is_ready(rec, s))
 *           infd_asr_decode(rec, s, &err);
 *       infd_asr_get_result(rec, s, &r, &err);   // partial transcript
 *       ...
 *       infd_asr_result_destroy(r);
 *   }
 *   infd_asr_input_finished(s);
 *   while (infd_asr_is_ready(rec, s))
 *       infd_asr_decode(rec, s, &err);
 *   infd_asr_get_result(rec, s, &r, &err);       // final transcript
 *
 * Models: a directory in the onnx-asr layout (encoder-model.onnx,
 * decoder_joint-model.onnx, vocab.txt, config.json) or the sherpa-onnx one
 * (encoder.onnx, decoder.onnx, joiner.onnx, tokens.txt), detected from its
 * files. Every tensor's name, dtype and shape is checked when the model
 * loads; a mismatch is INFD_STATUS_INVALID_ARGUMENT naming the file, the
 * tensor and what was expected.
 *
 * Streaming is buffered and chunked (NeMo's way for full-attention models
 * such as Parakeet v2/v3): the audio is cut into chunks of chunk_ms; a chunk
 * is encoded inside the window [left_ms | chunk | right_ms], only its
 * encoder frames are decoded, and the decoder's state is carried to the
 * next chunk. A chunk is ready once right_ms of audio after it has come (or
 * the input has finished), so a transcript lags the audio by chunk_ms +
 * right_ms at most. The three are whole encoder frames (80 ms).
 * Cache-aware models (sherpa-onnx exports whose encoder takes
 * cache_last_channel, cache_last_time and cache_last_channel_len) stream in
 * their own chunks instead (window_size and chunk_shift in their metadata),
 * the caches carried per stream: chunk_ms, left_ms and right_ms do not apply
 * (chunk_ms 0 still makes streams offline).
 *
 * Errors: every call that can fail returns an infd_status and fills the
 * nullable `err` with a message saying what is wrong; a stream or
 * recognizer stays usable after a rejected call (bad audio is not
 * appended). Handles are opaque; each has its destroy function, which
 * accepts NULL. Streams must be destroyed before their recognizer.
 *
 * Threads: streams may be fed and decoded from different threads, one
 * thread per stream at a time; the recognizer decodes one chunk at a time
 * (decode calls from several threads take turns).
 *
 * Memory: after a stream's first chunks, accepting audio at the model's
 * rate and decoding allocate nothing (the encoder's plans for the window
 * lengths are built on first use and kept; tests/unit/apps/test_asr_stream.c
 * counts the allocations). Results are allocated.
 */
#ifndef INFD_ASR_H
#define INFD_ASR_H

#include <stdint.h>

#include "infd/infd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct infd_asr_recognizer infd_asr_recognizer;
typedef struct infd_asr_stream infd_asr_stream;

typedef struct infd_asr_config {
    const char *model_dir; /* required */
    const char *device;    /* "cpu" (default), "cuda" or "cuda:N" */
    int num_threads;       /* engine threads; 0: all cores */
    /* Buffered streaming, in milliseconds (whole 80 ms encoder frames):
     * defaults 2000, 10000 and 2000 (NeMo's 10-2-2); chunks down to 80 ms.
     * chunk_ms 0 makes every stream offline: nothing is decoded before
     * infd_asr_input_finished, and then the audio is transcribed whole
     * (chunks of 20 s past 40 s). */
    int chunk_ms, left_ms, right_ms;
    /* Endpoints (sherpa-onnx's rules), in seconds of decoded audio since
     * the segment began: trailing silence (frames since the last token)
     * >= rule1 with no token yet (default 2.4); >= rule2 after a token
     * (1.2); the segment >= rule3 long (20). 0 turns a rule off. */
    float rule1_min_trailing_silence;
    float rule2_min_trailing_silence;
    float rule3_min_utterance_length;
    /* The model's contract (docs/ASR.md): NULL checks
     * <parent of model_dir>/contracts/<model>.contract.json when it is
     * there; a path given must be there. */
    const char *contract;
    /* The plans' precision: "fp32" (NULL, the default), "tf32", "fp16" or
     * "bf16" (engine.h, infd_plan_options.precision; tf32 and fp16 on
     * CUDA only). */
    const char *precision;
} infd_asr_config;

/* A word of a transcript: its text and times in seconds from the start of
 * the stream (the first token's frame; the last token's frame + duration). */
typedef struct infd_asr_word {
    const char *word;
    float start, end;
} infd_asr_word;

typedef struct infd_asr_result {
    const char *text;          /* SentencePiece pieces detokenised (U+2581 as spaces) */
    int32_t count;             /* tokens */
    const char *const *tokens; /* count pieces, as in the vocabulary */
    const int32_t *token_ids;  /* count ids */
    const float *timestamps;   /* count token starts, seconds from the start of the stream */
    const float *durations;    /* count token durations, seconds */
    int32_t n_words;
    const infd_asr_word *words;
    int32_t segment;  /* segments ended by infd_asr_reset before this one */
    float start_time; /* seconds: where the segment began */
    int32_t is_final; /* the input has finished and all of it is decoded */
    /* All of the above as one JSON object: {"text", "tokens", "token_ids",
     * "timestamps", "durations", "words": [{"word", "start", "end"}],
     * "segment", "start_time", "is_final"}. */
    const char *json;
} infd_asr_result;

/* Sets the defaults above; model_dir stays NULL. */
INFD_API void infd_asr_config_init(infd_asr_config *c);

/* Loads the model and builds its plans. INVALID_ARGUMENT for a config
 * value out of range (naming it) or a model that breaks the contract;
 * NOT_FOUND for a directory in neither layout; UNAVAILABLE for a device
 * this build or machine lacks. */
INFD_API infd_status infd_asr_recognizer_create(const infd_asr_config *c, infd_asr_recognizer **out,
                                                infd_error *err);
INFD_API void infd_asr_recognizer_destroy(infd_asr_recognizer *r);

/* The sample rate the model takes (audio at other rates is resampled). */
INFD_API int infd_asr_recognizer_sample_rate(const infd_asr_recognizer *r);

INFD_API infd_status infd_asr_stream_create(infd_asr_recognizer *r, infd_asr_stream **out,
                                            infd_error *err);
INFD_API void infd_asr_stream_destroy(infd_asr_stream *s);

/* Appends n mono samples in [-1, 1] at sample_rate (resampled with libsoxr
 * when it is not the model's; it may not change within a stream). Any n >= 0
 * (0 is a no-op). INVALID_ARGUMENT for a rate outside 4,000 to 1,000,000 Hz
 * or changed, a sample that is not finite or beyond 1000, or audio after
 * infd_asr_input_finished. */
INFD_API infd_status infd_asr_accept_waveform(infd_asr_stream *s, int32_t sample_rate,
                                              const float *samples, int64_t n, infd_error *err);

/* No more audio: what is left is decoded as the last chunk. */
INFD_API void infd_asr_input_finished(infd_asr_stream *s);

/* 1 when a chunk of s can be decoded, else 0. */
INFD_API int infd_asr_is_ready(const infd_asr_recognizer *r, const infd_asr_stream *s);

/* Decodes s's next ready chunk (nothing when none is ready). */
INFD_API infd_status infd_asr_decode(infd_asr_recognizer *r, infd_asr_stream *s, infd_error *err);

/* Decodes the next ready chunk of each of the n streams that has one: the
 * windows of equal padded length (every window of a cache-aware model, the
 * caches with them) go through the encoder together, up to 64 buffered
 * windows (16 cache-aware chunks) in one engine call, their features
 * computed on a thread per core; then their frames are decoded together,
 * each stream with its own decoder state (the onnx-asr layout's
 * decoder-joint run once per step for all the streams still decoding).
 * The first error stops the call. */
INFD_API infd_status infd_asr_decode_multiple(infd_asr_recognizer *r, infd_asr_stream **s,
                                              int32_t n, infd_error *err);

/* The transcript of s's current segment so far: partial until the input
 * has finished and every chunk is decoded (is_final). Free it with
 * infd_asr_result_destroy; its token pieces point into the recognizer. */
INFD_API infd_status infd_asr_get_result(const infd_asr_recognizer *r, const infd_asr_stream *s,
                                         infd_asr_result **out, infd_error *err);
INFD_API void infd_asr_result_destroy(infd_asr_result *res);

/* 1 when one of the endpoint rules holds for s's segment, else 0. */
INFD_API int infd_asr_is_endpoint(const infd_asr_recognizer *r, const infd_asr_stream *s);

/* Ends s's segment and begins the next: the transcript starts empty again;
 * the audio and the decoder's state go on. */
INFD_API void infd_asr_reset(infd_asr_recognizer *r, infd_asr_stream *s);

/* Registers the "asr" model kind (include/infd/plugin.h), so that servers
 * of this process serve model folders whose config.pbtxt says
 * `backend: "asr"`: streaming sessions under sequence_batching, whole
 * recordings without it (docs/ASR.md, "Serving"). Call it once, before the
 * server loads such a model; a second call fails (INVALID_ARGUMENT). */
INFD_API infd_status infd_asr_register_model_kind(infd_error *err);

#ifdef __cplusplus
}
#endif

#endif /* INFD_ASR_H */
