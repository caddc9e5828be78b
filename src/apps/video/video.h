/*
 * video.h - the live video app: SRT publishers in, faces found by a served
 * BlazeFace model, boxes drawn, H.264 over SRT out to viewers (docs/VIDEO.md).
 *
 * It sits above the public C API like a frontend: `infd video` runs it on a
 * server of its own, `infd serve --video-listen` on the serving one, where
 * the detector is an ordinary model whose dynamic batcher batches the
 * frames of every stream together with HTTP and gRPC requests.
 *
 * Lifecycle (the seed's): init -> warmup -> ready -> processing.
 * video_start checks the detector's shape, runs it `warmup_runs` times, and
 * only then opens the SRT listener ("ready"); the first publisher's frames
 * move a stream to processing.
 */
#ifndef INFD_APPS_VIDEO_VIDEO_H
#define INFD_APPS_VIDEO_VIDEO_H

#include <stdbool.h>
#include <stddef.h>

#include "infd/infd.h"

typedef struct infd_video_options {
    const char *listen; /* "srt://[HOST]:PORT" (HOST default 0.0.0.0); port 0 picks one */
    const char *model;  /* the served detector; "blazeface" */
    /* "cpu": decode, letterbox and draw on the CPU; "cuda": NVDEC decode and
     * CUDA letterbox and drawing, frames in device memory until the one
     * download for the encoder (NVENC where the GPU has one, else libx264,
     * said in the log). The detector's device is its model config's. */
    const char *device;
    int latency_ms;             /* SRT receive/peer latency; 120 (libsrt's default) */
    const char *passphrase;     /* AES passphrase of 10..79 bytes, or NULL: none */
    int max_connections;        /* publishers + viewers at once; 64 */
    float min_score;            /* 0.5 */
    float iou_threshold;        /* 0.3 */
    const char *x264_preset;    /* "ultrafast" */
    int encoder_threads;        /* the encoder's threads; 0: its own choice */
    int bitrate_kbps;           /* 4000 */
    const char *detections;     /* JSON lines to this file, "-": stdout; NULL: none */
    const char *default_stream; /* the stream of callers without a stream ID; "live" */
    int warmup_runs;            /* 20 */
    int stats_every;            /* log stage times every N frames a stream; 300; 0: never */
} infd_video_options;

void infd_video_options_init(infd_video_options *o);

typedef struct infd_video infd_video;

/* Warms the detector up and opens the listener. INVALID_ARGUMENT for bad
 * options (the message names the option) or a model that is not shaped
 * like BlazeFace, NOT_FOUND/UNAVAILABLE when the model is not served, IO
 * when the port cannot be bound. `s` is borrowed and must outlive the app. */
infd_status infd_video_start(infd_server *s, const infd_video_options *o, infd_video **out,
                             infd_error *err);

/* The bound SRT port. */
int infd_video_port(const infd_video *v);

/* Closes the listener, finishes every stream (the encoders are drained to
 * the viewers), closes every connection and frees `v`. NULL is a no-op. */
void infd_video_stop(infd_video *v);

/* Appends the app's Prometheus metrics (docs/VIDEO.md lists them) as a
 * NUL-terminated string of `*n` bytes; free it with infd_free. */
infd_status infd_video_metrics_render(infd_video *v, char **out, size_t *n, infd_error *err);

/* A subscriber to a stream's detections: the HTTP frontend's event stream
 * (Server-Sent Events), wired by the caller so the app needs no frontend.
 * `send` pushes one JSON line (no newline) and returns false once the
 * subscriber has gone; `release` lets it go. Both are called from the
 * stream's thread and must not block. */
typedef struct infd_video_subscriber {
    bool (*send)(void *sink, const char *line, size_t n);
    void (*release)(void *sink);
    void *sink;
} infd_video_subscriber;

/* Subscribes to the detections of stream `name` (it need not exist yet):
 * every frame's JSON line (as --detections writes it) goes to `sub` until
 * it goes away or the app stops; the app then calls sub->release.
 * INVALID_ARGUMENT for a bad stream name, RESOURCE_EXHAUSTED past 64
 * subscribers (the caller keeps the sink then). */
infd_status infd_video_subscribe(infd_video *v, const char *name, const infd_video_subscriber *sub,
                                 infd_error *err);

/* The streams as a JSON array ([{"name", "publishing", "viewers", "frames",
 * "width", "height", "fps"}]); free with infd_free. */
infd_status infd_video_streams_json(infd_video *v, char **out, size_t *n, infd_error *err);

#endif /* INFD_APPS_VIDEO_VIDEO_H */
