/*
 * pipeline.h - one live stream: its publisher's frames decoded, faces
 * detected by the served BlazeFace model, drawn, encoded with libx264,
 * muxed to MPEG-TS and sent to every viewer over SRT.
 *
 * A stream is made the first time a publisher or viewer names it and lives
 * until the app stops. Its thread takes one publisher at a time: a new
 * publisher for the stream replaces the current one (the usual case: the
 * same sender reconnecting before the old connection has timed out). The
 * encoder, the muxer and the output timestamps carry over from one
 * publisher to the next, so viewers see one continuous stream and need not
 * reconnect. Viewers join and leave at any time; the next frame after a
 * viewer joins is encoded as a key frame, so it has a picture at once.
 *
 * Threads: the stream's own thread does all the frame work; the app's
 * accept thread hands it publishers and viewers under the stream's lock.
 * Viewer sockets are written without blocking: a viewer too slow to take a
 * packet loses it (counted), never holds up the stream.
 */
#ifndef INFD_APPS_VIDEO_PIPELINE_H
#define INFD_APPS_VIDEO_PIPELINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "apps/video/detect.h"
#include "core/histogram.h"
#include "infd/infd.h"

/* The stages timed for every frame, in this order. */
#define VIDEO_STAGES(X)           \
    X(RECEIVE, "receive")         \
    X(DEMUX, "demux")             \
    X(DECODE, "decode")           \
    X(PREPROCESS, "preprocess")   \
    X(INFER, "infer")             \
    X(POSTPROCESS, "postprocess") \
    X(DRAW, "draw")               \
    X(ENCODE, "encode")           \
    X(SEND, "send")               \
    X(PROCESS, "process") /* decoder input -> encoder output (DeepStream's measure) */

typedef enum video_stage {
#define VIDEO_STAGE_ENUM_(name, str) VIDEO_STAGE_##name,
    VIDEO_STAGES(VIDEO_STAGE_ENUM_)
#undef VIDEO_STAGE_ENUM_
        VIDEO_N_STAGES
} video_stage;

extern const char *const video_stage_names[VIDEO_N_STAGES];

#define VIDEO_MAX_VIEWERS 64

/* What every stream of one app shares: the detector, the settings, the
 * detections sink and the counters. Owned by the app (video.c). */
typedef struct video_shared {
    infd_model *model; /* the detector (retained by the app) */
    const char *input_name;
    int input_size; /* S of the [S, S, 3] input */
    /* Output names: scores and regressors of the 16x16 and 8x8 grids. */
    const char *out_scores16, *out_boxes16, *out_scores8, *out_boxes8;
    video_detect_options detect;
    const char *x264_preset;
    int encoder_threads; /* 0: the encoder's own choice */
    int bitrate_kbps;
    bool cuda;           /* NVDEC decode and CUDA letterbox/drawing (gpu.h) */
    const char *encoder; /* "libx264", or "h264_nvenc" where the GPU has NVENC */
    int stats_every;     /* log a stream's stage times every N frames; 0: never */
    FILE *detections;    /* JSON lines, or NULL */
    pthread_mutex_t detections_lock;
    atomic_bool stopping;
    /* Per-stage times of every frame of every stream, microseconds. */
    infd_histogram *stage[VIDEO_N_STAGES];
    _Atomic uint64_t frames, faces, decode_errors, infer_errors, packets_dropped;
    _Atomic uint64_t publishers_total, viewers_total;
    /* Called (on a stream's thread) after it closes a publisher socket. */
    void (*on_publisher_closed)(void *user);
    /* A frame's detections line (no newline) for the stream's subscribers
     * (on its thread); called while subscribers > 0. */
    void (*on_detections)(void *user, const char *stream, const char *line, size_t n);
    _Atomic int subscribers;
    void *user;
} video_shared;

typedef struct video_stream video_stream;

/* Makes stream `name` and starts its thread. OUT_OF_MEMORY, or INTERNAL
 * when the thread cannot start. */
infd_status video_stream_create(video_shared *sh, const char *name, video_stream **out,
                                infd_error *err);

/* Stops the thread (the app has set sh->stopping): the current frame
 * finishes, the encoder is drained to the viewers, and every socket of
 * the stream is closed. NULL is a no-op. */
void video_stream_destroy(video_stream *s);

const char *video_stream_name(const video_stream *s);

/* Hands the stream a publisher socket (takes it). A publisher already
 * streaming is disconnected first; one waiting to start is replaced. */
void video_stream_publish(video_stream *s, int sock);

/* Adds a viewer socket (the stream sends to it; the caller keeps it and
 * closes it after video_stream_remove_viewer). RESOURCE_EXHAUSTED past
 * VIDEO_MAX_VIEWERS. */
infd_status video_stream_add_viewer(video_stream *s, int sock, infd_error *err);
/* True when `sock` was a viewer of the stream (it is not any more). */
bool video_stream_remove_viewer(video_stream *s, int sock);

typedef struct video_stream_info {
    bool publishing;
    int viewers;
    uint64_t frames;
    int width, height;
    double fps;
} video_stream_info;
void video_stream_get_info(video_stream *s, video_stream_info *out);

#endif /* INFD_APPS_VIDEO_PIPELINE_H */
