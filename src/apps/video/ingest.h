/*
 * ingest.h - what comes in: SRT stream IDs, and a publisher's MPEG-TS over
 * SRT demuxed and decoded to frames (libsrt, libavformat, libavcodec).
 *
 * Stream IDs follow SRT's access-control form, `#!::r=NAME,m=publish` (or
 * m=request for a viewer); any other non-empty ID is the stream's name, and
 * no ID at all means the default stream. The role is then decided by what
 * the caller does (docs/VIDEO.md, "Who is a publisher").
 *
 * A video_ingest reads one publisher connection at a time: a custom AVIO
 * whose read callback takes SRT messages from the socket (non-blocking,
 * waiting in an SRT epoll so a stop request is seen within 100 ms), the
 * mpegts demuxer (no stream probing: the PMT names the H.264 stream), and
 * FFmpeg's H.264 decoder in low-delay mode, one thread, so each packet in
 * is a frame out. Corrupt or truncated input is logged, never fatal: the
 * demuxer resynchronises on the next TS sync byte, the decoder conceals what
 * it cannot decode, and bytes that make no packet are skipped. The object is made once per stream
 * and reused for every publisher (packet, frame and I/O buffer are allocated once); only opening a
 * publisher's demuxer and decoder allocates.
 */
#ifndef INFD_APPS_VIDEO_INGEST_H
#define INFD_APPS_VIDEO_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infd/infd.h"

struct AVFrame;

/* Longest stream name: letters, digits and . _ - / */
#define VIDEO_NAME_MAX 64

typedef enum video_role {
    VIDEO_ROLE_UNSAID = 0, /* no m= key: decided by what the caller does */
    VIDEO_ROLE_PUBLISH,    /* m=publish */
    VIDEO_ROLE_VIEW,       /* m=request */
} video_role;

typedef struct video_streamid {
    char name[VIDEO_NAME_MAX + 1];
    video_role role;
} video_streamid;

/* Parses a stream ID of `n` bytes (not NUL-terminated; n = 0: none, the
 * `default_name` stream). INVALID_ARGUMENT, saying what is wrong and where,
 * for an access-control ID with a malformed pair, an unknown m= mode, a
 * repeated key, or a name that is empty, too long or has other characters. */
infd_status video_streamid_parse(const char *sid, size_t n, const char *default_name,
                                 video_streamid *out, infd_error *err);

/* libsrt's last error on this thread as an infd_error: what + its text. */
infd_status video_srt_error(infd_error *err, const char *what);

/* Messages in an SRT socket's receive buffer (SRTO_RCVDATA: due or still
 * held for the latency); 0 when none or the socket is gone. */
int video_srt_held(int sock);
/* An FFmpeg error code as an infd_error: what + av_strerror's text. */
infd_status video_av_error(infd_error *err, int averr, const char *what);

/* Per-frame costs of the ingest stages, in nanoseconds. */
typedef struct video_ingest_timing {
    uint64_t receive_ns; /* inside libsrt receive calls (not waiting for data) */
    uint64_t demux_ns;   /* inside the demuxer, less receive_ns and waiting for data */
    uint64_t decode_ns;  /* sending the frame's packet and receiving the frame */
    uint64_t decode_in;  /* infd_clock_ns() when the packet went into the decoder */
} video_ingest_timing;

typedef struct video_ingest video_ingest;

/* Returns true when reading should end (the server is stopping, or another
 * publisher takes the stream over). Polled at least every 100 ms. */
typedef bool (*video_ingest_stop_fn)(void *user);

/* OUT_OF_MEMORY is the only error. With `hw_device` (an FFmpeg CUDA device,
 * an AVBufferRef: gpu.h's video_gpu_device; referenced, not taken), H.264
 * is decoded by the GPU through FFmpeg's CUDA hwaccel: frames come out as
 * AV_PIX_FMT_CUDA, NV12 in device memory. NULL: on the CPU. */
infd_status video_ingest_create(const char *stream, const void *hw_device, video_ingest **out,
                                infd_error *err);
void video_ingest_destroy(video_ingest *in);

/* Starts reading publisher socket `sock` (borrowed; the caller closes it
 * after video_ingest_close): waits for the transport stream's PMT and opens
 * the decoder of its H.264 video. INVALID_ARGUMENT when the input is not a
 * transport stream with H.264 video, UNAVAILABLE when the connection ends
 * or stop() says so first. */
infd_status video_ingest_open(video_ingest *in, int sock, video_ingest_stop_fn stop, void *user,
                              infd_error *err);

/* The next decoded frame into `frame` (unreferenced first; the decoder's
 * buffer, read-only). 1: a frame; 0: the publisher is gone (connection
 * closed, stopped, or the input ended) and the decoder has been drained. */
int video_ingest_read(video_ingest *in, struct AVFrame *frame, video_ingest_timing *t);

/* Frames per second the stream says it has (H.264 timing info), else 30. */
double video_ingest_fps(const video_ingest *in);
/* The input stream's time base (PTS units per second: 90000 for TS). */
int64_t video_ingest_pts_rate(const video_ingest *in);
/* Counts since create: packets skipped as corrupt, decode errors. */
uint64_t video_ingest_errors(const video_ingest *in);

/* True once the publisher has left while messages it sent are still being
 * read (SRT holds each for the latency; ingest.c, read_held). Read on the
 * ingest's own thread, e.g. from its stop() callback. */
bool video_ingest_publisher_gone(const video_ingest *in);

/* Closes the demuxer and decoder (not the socket). Safe after a failed
 * open; then open may be called again for the next publisher. */
void video_ingest_close(video_ingest *in);

#endif /* INFD_APPS_VIDEO_INGEST_H */
