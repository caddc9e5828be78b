/*
 * video.c - the live video app (video.h): the detector check and warmup,
 * the SRT listener, and who is a publisher and who a viewer.
 *
 * Life of a connection: libsrt's handshake calls listen_hook, which parses
 * the stream ID and refuses a malformed one or one past the connection cap
 * (the caller gets SRT's reject reason). The accept thread then accepts the
 * socket and, by its stream ID's mode:
 *   m=publish      hands it to the stream as its publisher;
 *   m=request      adds it to the stream's viewers;
 *   no mode        adds it to the viewers *for now*: a caller that sends
 *                  media (its socket becomes readable) is taken out of the
 *                  viewers and made the stream's publisher. So the seed's
 *                  plain `srtsink` sender and `srtsrc` viewer, neither with
 *                  a stream ID, find their roles by what they do.
 * Viewers stay in the accept thread's SRT epoll: an error event (the peer
 * left, the connection broke) removes and closes them. Publishers belong to
 * their stream's thread from the hand-over on.
 *
 * Threads: the accept thread (which owns the connection table), one thread
 * per stream (pipeline.c), and libsrt's own. Streams are made on first
 * mention, at most VIDEO_MAX_STREAMS, and live until stop.
 */
#include "apps/video/video.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>
#include <libavcodec/avcodec.h>
#include <libavutil/log.h>
#include <srt/access_control.h>
#include <srt/srt.h>

#include "apps/video/ingest.h"
#include "apps/video/pipeline.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/strbuf.h"

#define VIDEO_MAX_STREAMS     16
#define SID_MAX               512 /* libsrt's limit on a stream ID */
#define VIDEO_MAX_SUBSCRIBERS 64

typedef enum conn_role { CONN_FREE = 0, CONN_TENTATIVE, CONN_VIEWER } conn_role;

typedef struct conn {
    int sock;
    conn_role role;
    video_stream *stream;
} conn;

struct infd_video {
    infd_video_options o;
    char model_name[128];
    char host[64];
    int port;
    char passphrase[80];
    char default_stream[VIDEO_NAME_MAX + 1];
    video_shared sh;
    bool own_detections; /* sh.detections is a file we opened */
    int listener;
    int eid;
    pthread_t thread;
    bool started;
    _Atomic int n_conns; /* accepted and not yet closed, publishers included */

    pthread_mutex_t sub_lock; /* guards subs[] */
    struct subscription {
        char name[VIDEO_NAME_MAX + 1];
        infd_video_subscriber sub;
        bool used;
    } subs[VIDEO_MAX_SUBSCRIBERS];

    pthread_mutex_t lock; /* guards streams[] (read by the metrics and JSON) */
    video_stream *streams[VIDEO_MAX_STREAMS];
    int n_streams;
    conn *conns; /* o.max_connections entries; the accept thread's */
};

void infd_video_options_init(infd_video_options *o)
{
    memset(o, 0, sizeof(*o));
    o->listen = "srt://:9000";
    o->model = "blazeface";
    o->device = "cpu";
    o->latency_ms = 120;
    o->max_connections = 64;
    o->min_score = 0.5f;
    o->iou_threshold = 0.3f;
    o->x264_preset = "ultrafast";
    o->bitrate_kbps = 4000;
    o->default_stream = "live";
    o->warmup_runs = 20;
    o->stats_every = 300;
}

/* "srt://[HOST]:PORT" (query strings are not taken: options say it). */
static infd_status parse_listen(infd_video *v, const char *url, infd_error *err)
{
    static const char scheme[] = "srt://";
    if (strncmp(url, scheme, sizeof(scheme) - 1) != 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "listen address '%s': expected srt://[HOST]:PORT", url);
    const char *hp = url + sizeof(scheme) - 1;
    const char *colon = strrchr(hp, ':');
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : -1;
    if (!colon || !colon[1] || *end || port < 0 || port > 65535 ||
        (size_t)(colon - hp) >= sizeof(v->host))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "listen address '%s': expected srt://[HOST]:PORT", url);
    if (colon == hp)
        snprintf(v->host, sizeof(v->host), "0.0.0.0");
    else
        snprintf(v->host, sizeof(v->host), "%.*s", (int)(colon - hp), hp);
    v->port = (int)port;
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* The detector                                                              */
/* ------------------------------------------------------------------------- */

static bool dims_are(const infd_model_io *io, int64_t a, int64_t b)
{
    return io->rank == 2 && io->dims[0] == a && io->dims[1] == b;
}

/* Checks that the model is shaped like BlazeFace and finds its outputs. */
static infd_status check_model(infd_video *v, infd_error *err)
{
    infd_model *m = v->sh.model;
    infd_model_io in;
    if (infd_model_max_batch_size(m) <= 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model %s: the video app needs a batching detector "
                              "(max_batch_size >= 1)",
                              v->model_name);
    if (infd_model_n_inputs(m) != 1 || infd_model_input(m, 0, &in) != INFD_STATUS_OK ||
        in.dtype != INFD_DTYPE_FP32 || in.rank != 3 || in.dims[0] != in.dims[1] ||
        in.dims[2] != 3 || in.dims[0] < 32 || in.dims[0] > 1024)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model %s: expected one FP32 input [S, S, 3] (BlazeFace's NHWC "
                              "image)",
                              v->model_name);
    v->sh.input_name = in.name;
    v->sh.input_size = (int)in.dims[0];
    for (int i = 0; i < infd_model_n_outputs(m); i++) {
        infd_model_io o;
        if (infd_model_output(m, i, &o) != INFD_STATUS_OK || o.dtype != INFD_DTYPE_FP32)
            continue;
        if (dims_are(&o, VIDEO_ANCHORS_16, 1))
            v->sh.out_scores16 = o.name;
        else if (dims_are(&o, VIDEO_ANCHORS - VIDEO_ANCHORS_16, 1))
            v->sh.out_scores8 = o.name;
        else if (dims_are(&o, VIDEO_ANCHORS_16, VIDEO_REGRESSORS))
            v->sh.out_boxes16 = o.name;
        else if (dims_are(&o, VIDEO_ANCHORS - VIDEO_ANCHORS_16, VIDEO_REGRESSORS))
            v->sh.out_boxes8 = o.name;
    }
    if (!v->sh.out_scores16 || !v->sh.out_scores8 || !v->sh.out_boxes16 || !v->sh.out_boxes8)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "model %s: expected BlazeFace's four FP32 outputs, [512, 1], "
                              "[384, 1], [512, 16] and [384, 16]",
                              v->model_name);
    return INFD_STATUS_OK;
}

static infd_status warmup(infd_video *v, infd_error *err)
{
    int S = v->sh.input_size;
    size_t bytes = (size_t)S * S * 3 * sizeof(float);
    float *input = infd_calloc(1, bytes);
    if (!input)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "warmup: out of memory");
    infd_status st = INFD_STATUS_OK;
    uint64_t t0 = infd_clock_ns();
    int64_t shape[4] = { 1, S, S, 3 };
    for (int i = 0; i < v->o.warmup_runs && st == INFD_STATUS_OK; i++) {
        infd_request *req = NULL;
        st = infd_request_create(v->sh.model, &req, err);
        if (st == INFD_STATUS_OK)
            st = infd_request_add_input(req, v->sh.input_name, INFD_DTYPE_FP32, shape, 4, input,
                                        bytes, err);
        if (st == INFD_STATUS_OK)
            st = infd_infer(req, err);
        infd_request_destroy(req);
    }
    infd_free(input);
    if (st != INFD_STATUS_OK)
        return infd_error_prefix(err, "model %s: warmup", v->model_name);
    if (v->o.warmup_runs > 0)
        infd_log(INFD_LOG_LEVEL_INFO, "video: warmup: %d runs of %s (%dx%d), %.2f ms each",
                 v->o.warmup_runs, v->model_name, S, S,
                 (infd_clock_ns() - t0) / 1e6 / v->o.warmup_runs);
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Connections                                                               */
/* ------------------------------------------------------------------------- */

/* FFmpeg's log lines go through infd's logger, errors and warnings only:
 * what a corrupt packet makes the demuxer or decoder say. */
static void av_log_to_infd(void *avcl, int level, const char *fmt, va_list vl)
{
    if (level > AV_LOG_WARNING)
        return;
    char line[512];
    int prefix = 1;
    av_log_format_line2(avcl, level, fmt, vl, line, sizeof(line), &prefix);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    infd_log(level <= AV_LOG_ERROR ? INFD_LOG_LEVEL_WARN : INFD_LOG_LEVEL_DEBUG,
             "video: ffmpeg: %s", line);
}

/* libsrt's handshake hook (on libsrt's thread): refuses stream IDs that do
 * not parse and callers past the connection cap. */
static int listen_hook(void *opaque, SRTSOCKET ns, int hsversion, const struct sockaddr *peer,
                       const char *streamid)
{
    (void)hsversion;
    (void)peer;
    infd_video *v = opaque;
    video_streamid sid;
    infd_error err;
    infd_error_clear(&err);
    size_t n = streamid ? strnlen(streamid, SID_MAX + 1) : 0;
    if (video_streamid_parse(streamid, n, v->default_stream, &sid, &err) != INFD_STATUS_OK) {
        infd_log(INFD_LOG_LEVEL_WARN, "video: connection refused: %s", err.msg);
        srt_setrejectreason(ns, SRT_REJX_BAD_REQUEST);
        return -1;
    }
    if (atomic_load(&v->n_conns) >= v->o.max_connections) {
        infd_log(INFD_LOG_LEVEL_WARN, "video: connection refused: %d connections already",
                 v->o.max_connections);
        srt_setrejectreason(ns, SRT_REJX_OVERLOAD);
        return -1;
    }
    return 0;
}

static video_stream *stream_get(infd_video *v, const char *name, infd_error *err)
{
    pthread_mutex_lock(&v->lock);
    video_stream *s = NULL;
    for (int i = 0; i < v->n_streams && !s; i++)
        if (strcmp(video_stream_name(v->streams[i]), name) == 0)
            s = v->streams[i];
    if (!s) {
        if (v->n_streams == VIDEO_MAX_STREAMS)
            infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED, "%d streams already",
                           VIDEO_MAX_STREAMS);
        else if (video_stream_create(&v->sh, name, &s, err) == INFD_STATUS_OK)
            v->streams[v->n_streams++] = s;
    }
    pthread_mutex_unlock(&v->lock);
    return s;
}

static conn *conn_find(infd_video *v, int sock)
{
    for (int i = 0; i < v->o.max_connections; i++)
        if (v->conns[i].role != CONN_FREE && v->conns[i].sock == sock)
            return &v->conns[i];
    return NULL;
}

static conn *conn_new(infd_video *v)
{
    for (int i = 0; i < v->o.max_connections; i++)
        if (v->conns[i].role == CONN_FREE)
            return &v->conns[i];
    return NULL;
}

static void conn_close(infd_video *v, conn *c)
{
    srt_epoll_remove_usock(v->eid, c->sock);
    video_stream_remove_viewer(c->stream, c->sock);
    srt_close(c->sock);
    atomic_fetch_sub(&v->n_conns, 1);
    c->role = CONN_FREE;
}

static void accept_one(infd_video *v)
{
    struct sockaddr_storage addr;
    int alen = sizeof(addr);
    SRTSOCKET sock = srt_accept(v->listener, (struct sockaddr *)&addr, &alen);
    if (sock == SRT_INVALID_SOCK)
        return;
    atomic_fetch_add(&v->n_conns, 1);
    char sidbuf[SID_MAX + 1] = "";
    int slen = sizeof(sidbuf) - 1;
    if (srt_getsockflag(sock, SRTO_STREAMID, sidbuf, &slen) != 0)
        slen = 0;
    video_streamid sid;
    infd_error err;
    infd_error_clear(&err);
    video_stream *s = NULL;
    conn *c = NULL;
    bool no = false;
    srt_setsockflag(sock, SRTO_RCVSYN, &no, sizeof(no));
    srt_setsockflag(sock, SRTO_SNDSYN, &no, sizeof(no));
    if (video_streamid_parse(sidbuf, (size_t)slen, v->default_stream, &sid, &err) !=
            INFD_STATUS_OK ||
        !(s = stream_get(v, sid.name, &err)))
        goto refuse;
    if (sid.role == VIDEO_ROLE_PUBLISH) {
        infd_log(INFD_LOG_LEVEL_INFO, "video: stream %s: publisher connected", sid.name);
        video_stream_publish(s, sock);
        return;
    }
    c = conn_new(v);
    if (!c) {
        infd_error_set(&err, INFD_STATUS_RESOURCE_EXHAUSTED, "%d connections already",
                       v->o.max_connections);
        goto refuse;
    }
    if (video_stream_add_viewer(s, sock, &err) != INFD_STATUS_OK)
        goto refuse;
    int events = SRT_EPOLL_IN | SRT_EPOLL_ERR;
    if (srt_epoll_add_usock(v->eid, sock, &events) != 0) {
        video_stream_remove_viewer(s, sock);
        video_srt_error(&err, "epoll");
        goto refuse;
    }
    c->sock = sock;
    c->stream = s;
    c->role = sid.role == VIDEO_ROLE_VIEW ? CONN_VIEWER : CONN_TENTATIVE;
    infd_log(INFD_LOG_LEVEL_INFO, "video: stream %s: %s connected", sid.name,
             c->role == CONN_VIEWER ? "viewer" : "caller (a viewer until it sends media)");
    return;
refuse:
    infd_log(INFD_LOG_LEVEL_WARN, "video: connection closed: %s", err.msg);
    srt_close(sock);
    atomic_fetch_sub(&v->n_conns, 1);
}

static void on_event(infd_video *v, const SRT_EPOLL_EVENT *ev)
{
    if (ev->fd == v->listener) {
        accept_one(v);
        return;
    }
    conn *c = conn_find(v, ev->fd);
    if (!c)
        return;
    /* A caller that sent media and left at once (IN and ERR together, with
     * messages in its receive buffer) is still a publisher: its last
     * messages are read before the end. A caller that only left gets IN
     * and ERR too (libsrt wakes readers of a broken socket), with nothing
     * held: a viewer leaving, which must not take the stream over. */
    bool sent = (ev->events & SRT_EPOLL_IN) &&
                (!(ev->events & SRT_EPOLL_ERR) || video_srt_held(c->sock) > 0);
    if ((ev->events & SRT_EPOLL_ERR) && !(c->role == CONN_TENTATIVE && sent)) {
        infd_log(INFD_LOG_LEVEL_INFO, "video: stream %s: viewer left",
                 video_stream_name(c->stream));
        conn_close(v, c);
        return;
    }
    if (!(ev->events & SRT_EPOLL_IN))
        return;
    if (c->role == CONN_TENTATIVE) {
        /* It sends media: the stream's publisher from now on. */
        srt_epoll_remove_usock(v->eid, c->sock);
        video_stream_remove_viewer(c->stream, c->sock);
        infd_log(INFD_LOG_LEVEL_INFO, "video: stream %s: the caller sends media: publisher",
                 video_stream_name(c->stream));
        video_stream_publish(c->stream, c->sock);
        c->role = CONN_FREE;
        return;
    }
    /* A viewer that sends: what it sends is not used. */
    char buf[1500];
    int guard = 64;
    while (guard-- > 0 && srt_recvmsg(c->sock, buf, sizeof(buf)) > 0) {
    }
}

static void *accept_main(void *arg)
{
    infd_video *v = arg;
    SRT_EPOLL_EVENT events[64];
    while (!atomic_load(&v->sh.stopping)) {
        int n = srt_epoll_uwait(v->eid, events, 64, 100);
        for (int i = 0; i < n; i++)
            on_event(v, &events[i]);
    }
    return NULL;
}

/* A frame's detections to the stream's subscribers; those gone are let go. */
static void on_detections(void *user, const char *stream, const char *line, size_t n)
{
    infd_video *v = user;
    pthread_mutex_lock(&v->sub_lock);
    for (int i = 0; i < VIDEO_MAX_SUBSCRIBERS; i++) {
        struct subscription *sub = &v->subs[i];
        if (!sub->used || strcmp(sub->name, stream) != 0)
            continue;
        if (!sub->sub.send(sub->sub.sink, line, n)) {
            sub->sub.release(sub->sub.sink);
            sub->used = false;
            atomic_fetch_sub(&v->sh.subscribers, 1);
        }
    }
    pthread_mutex_unlock(&v->sub_lock);
}

infd_status infd_video_subscribe(infd_video *v, const char *name, const infd_video_subscriber *sub,
                                 infd_error *err)
{
    video_streamid sid;
    if (video_streamid_parse(name, strlen(name), v->default_stream, &sid, err) != INFD_STATUS_OK)
        return err ? err->code : INFD_STATUS_INVALID_ARGUMENT;
    infd_status st = INFD_STATUS_RESOURCE_EXHAUSTED;
    pthread_mutex_lock(&v->sub_lock);
    for (int i = 0; i < VIDEO_MAX_SUBSCRIBERS; i++) {
        if (!v->subs[i].used) {
            snprintf(v->subs[i].name, sizeof(v->subs[i].name), "%s", sid.name);
            v->subs[i].sub = *sub;
            v->subs[i].used = true;
            atomic_fetch_add(&v->sh.subscribers, 1);
            st = INFD_STATUS_OK;
            break;
        }
    }
    pthread_mutex_unlock(&v->sub_lock);
    if (st != INFD_STATUS_OK)
        return infd_error_set(err, st, "video: %d detection subscribers already",
                              VIDEO_MAX_SUBSCRIBERS);
    infd_log(INFD_LOG_LEVEL_INFO, "video: stream %s: a detections subscriber", sid.name);
    return INFD_STATUS_OK;
}

/* A stream thread closes its publisher: the count goes down there. */
static void publisher_closed(void *user)
{
    infd_video *v = user;
    atomic_fetch_sub(&v->n_conns, 1);
}

/* ------------------------------------------------------------------------- */
/* Start and stop                                                            */
/* ------------------------------------------------------------------------- */

/* On the GPU path: NVENC when the GPU has an encoder, found by opening a
 * small session (the H100 and H200 have none: "OpenEncodeSessionEx
 * failed: unsupported device"), else libx264 on the CPU. Said in the log. */
static void choose_encoder(infd_video *v)
{
    const AVCodec *codec = avcodec_find_encoder_by_name("h264_nvenc");
    const char *why = "FFmpeg here has no h264_nvenc";
    char text[AV_ERROR_MAX_STRING_SIZE] = "";
    if (codec) {
        AVCodecContext *c = avcodec_alloc_context3(codec);
        int rc = AVERROR(ENOMEM);
        if (c) {
            c->width = 256;
            c->height = 256;
            c->pix_fmt = AV_PIX_FMT_NV12;
            c->time_base = (AVRational){ 1, 90000 };
            c->framerate = (AVRational){ 30, 1 };
            av_log_set_level(AV_LOG_QUIET); /* the failure is said below, once */
            rc = avcodec_open2(c, codec, NULL);
            av_log_set_level(AV_LOG_INFO);
        }
        avcodec_free_context(&c);
        if (rc >= 0) {
            v->sh.encoder = "h264_nvenc";
            infd_log(INFD_LOG_LEVEL_INFO, "video: encoder: NVENC (h264_nvenc)");
            return;
        }
        av_strerror(rc, text, sizeof(text));
        why = text;
    }
    infd_log(INFD_LOG_LEVEL_INFO,
             "video: encoder: this GPU has no usable NVENC (%s): encoding with libx264 on the "
             "CPU",
             why);
}

static infd_status open_listener(infd_video *v, infd_error *err)
{
    v->listener = srt_create_socket();
    if (v->listener == SRT_INVALID_SOCK)
        return video_srt_error(err, "SRT socket");
    int live = SRTT_LIVE;
    int latency = v->o.latency_ms;
    if (srt_setsockflag(v->listener, SRTO_TRANSTYPE, &live, sizeof(live)) != 0 ||
        srt_setsockflag(v->listener, SRTO_RCVLATENCY, &latency, sizeof(latency)) != 0 ||
        srt_setsockflag(v->listener, SRTO_PEERLATENCY, &latency, sizeof(latency)) != 0)
        return video_srt_error(err, "SRT options");
    if (v->passphrase[0] && srt_setsockflag(v->listener, SRTO_PASSPHRASE, v->passphrase,
                                            (int)strlen(v->passphrase)) != 0)
        return video_srt_error(err, "passphrase");
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)v->port) };
    if (inet_pton(AF_INET, v->host, &sa.sin_addr) != 1)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "listen address: '%s' is not an IPv4 address", v->host);
    if (srt_bind(v->listener, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        video_srt_error(err, "bind");
        return infd_error_prefix(err, "srt://%s:%d", v->host, v->port);
    }
    if (srt_listen_callback(v->listener, listen_hook, v) != 0 ||
        srt_listen(v->listener, v->o.max_connections) != 0)
        return video_srt_error(err, "listen");
    struct sockaddr_in bound;
    int blen = sizeof(bound);
    if (srt_getsockname(v->listener, (struct sockaddr *)&bound, &blen) == 0)
        v->port = ntohs(bound.sin_port);
    v->eid = srt_epoll_create();
    int events = SRT_EPOLL_IN | SRT_EPOLL_ERR;
    if (v->eid < 0 || srt_epoll_add_usock(v->eid, v->listener, &events) != 0)
        return video_srt_error(err, "epoll");
    return INFD_STATUS_OK;
}

infd_status infd_video_start(infd_server *server, const infd_video_options *o, infd_video **out,
                             infd_error *err)
{
    *out = NULL;
    infd_status st;
    infd_video *v = infd_calloc(1, sizeof(*v));
    if (!v)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "video: out of memory");
    v->o = *o;
    v->listener = SRT_INVALID_SOCK;
    v->eid = -1;
    pthread_mutex_init(&v->lock, NULL);
    pthread_mutex_init(&v->sub_lock, NULL);
    pthread_mutex_init(&v->sh.detections_lock, NULL);
    srt_startup();
    snprintf(v->model_name, sizeof(v->model_name), "%s", o->model ? o->model : "blazeface");
    video_streamid sid;
    if ((st = parse_listen(v, o->listen ? o->listen : "", err)) != INFD_STATUS_OK)
        goto fail;
    if ((st = video_streamid_parse(o->default_stream, strlen(o->default_stream), "", &sid, err)) !=
        INFD_STATUS_OK) {
        infd_error_prefix(err, "default stream");
        goto fail;
    }
    snprintf(v->default_stream, sizeof(v->default_stream), "%s", sid.name);
    if (o->passphrase) {
        size_t n = strlen(o->passphrase);
        if (n < 10 || n > 79) {
            st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                "passphrase: %zu characters; SRT takes 10 to 79", n);
            goto fail;
        }
        memcpy(v->passphrase, o->passphrase, n + 1);
    }
    if (o->latency_ms < 0 || o->latency_ms > 10000 || o->max_connections < 1 ||
        o->max_connections > 1024 || o->bitrate_kbps < 16 || o->encoder_threads < 0 ||
        o->encoder_threads > 64 || !(o->min_score > 0) || !(o->min_score < 1) ||
        !(o->iou_threshold > 0) || !(o->iou_threshold < 1)) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "video options: latency 0..10000 ms, connections 1..1024, bitrate "
                            ">= 16 kbit/s, encoder threads 0..64, score and IoU thresholds in "
                            "(0, 1)");
        goto fail;
    }
    v->conns = infd_calloc((size_t)o->max_connections, sizeof(conn));
    bool oom = !v->conns;
    for (int i = 0; i < VIDEO_N_STAGES; i++)
        oom |= !(v->sh.stage[i] = infd_histogram_create());
    if (oom) {
        st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "video: out of memory");
        goto fail;
    }
    v->sh.detect.min_score = o->min_score;
    v->sh.detect.iou_threshold = o->iou_threshold;
    v->sh.x264_preset = o->x264_preset;
    v->sh.encoder_threads = o->encoder_threads;
    v->sh.encoder = "libx264";
    if (o->device && strcmp(o->device, "cuda") == 0) {
        v->sh.cuda = true;
        choose_encoder(v);
    } else if (o->device && strcmp(o->device, "cpu") != 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "video device '%s': cpu or cuda",
                            o->device);
        goto fail;
    }
    v->sh.bitrate_kbps = o->bitrate_kbps;
    v->sh.stats_every = o->stats_every;
    v->sh.on_publisher_closed = publisher_closed;
    v->sh.on_detections = on_detections;
    v->sh.user = v;
    if (o->detections) {
        if (strcmp(o->detections, "-") == 0) {
            v->sh.detections = stdout;
        } else if (!(v->sh.detections = fopen(o->detections, "w"))) {
            st = infd_error_set(err, INFD_STATUS_IO, "detections file %s: %s", o->detections,
                                strerror(errno));
            goto fail;
        } else {
            v->own_detections = true;
        }
    }

    infd_log(INFD_LOG_LEVEL_INFO, "video: state init: detector %s", v->model_name);
    if ((st = infd_server_model_acquire(server, v->model_name, -1, &v->sh.model, err)) !=
        INFD_STATUS_OK)
        goto fail;
    if ((st = check_model(v, err)) != INFD_STATUS_OK)
        goto fail;
    infd_log(INFD_LOG_LEVEL_INFO, "video: state warmup");
    if ((st = warmup(v, err)) != INFD_STATUS_OK)
        goto fail;
    av_log_set_callback(av_log_to_infd);
    if ((st = open_listener(v, err)) != INFD_STATUS_OK)
        goto fail;
    if (pthread_create(&v->thread, NULL, accept_main, v) != 0) {
        st = infd_error_set(err, INFD_STATUS_INTERNAL, "video: cannot start the accept thread");
        goto fail;
    }
    v->started = true;
    infd_log(INFD_LOG_LEVEL_INFO,
             "video: state ready: SRT listening on srt://%s:%d (latency %d ms%s), detector %s "
             "%dx%d, frames on the %s",
             v->host, v->port, o->latency_ms, v->passphrase[0] ? ", AES passphrase" : "",
             v->model_name, v->sh.input_size, v->sh.input_size, v->sh.cuda ? "GPU" : "CPU");
    *out = v;
    return INFD_STATUS_OK;
fail:
    infd_video_stop(v);
    return st;
}

int infd_video_port(const infd_video *v)
{
    return v->port;
}

void infd_video_stop(infd_video *v)
{
    if (!v)
        return;
    atomic_store(&v->sh.stopping, true);
    if (v->started)
        pthread_join(v->thread, NULL);
    if (v->listener != SRT_INVALID_SOCK)
        srt_close(v->listener);
    for (int i = 0; i < v->n_streams; i++)
        video_stream_destroy(v->streams[i]);
    for (int i = 0; i < VIDEO_MAX_SUBSCRIBERS; i++)
        if (v->subs[i].used)
            v->subs[i].sub.release(v->subs[i].sub.sink);
    if (v->eid >= 0)
        srt_epoll_release(v->eid);
    srt_cleanup();
    if (v->sh.model)
        infd_model_release(v->sh.model);
    if (v->own_detections)
        fclose(v->sh.detections);
    for (int i = 0; i < VIDEO_N_STAGES; i++)
        infd_histogram_destroy(v->sh.stage[i]);
    infd_free(v->conns);
    pthread_mutex_destroy(&v->lock);
    pthread_mutex_destroy(&v->sub_lock);
    pthread_mutex_destroy(&v->sh.detections_lock);
    if (v->started)
        infd_log(INFD_LOG_LEVEL_INFO, "video: stopped");
    infd_free(v);
}

/* ------------------------------------------------------------------------- */
/* Metrics and the streams' JSON                                             */
/* ------------------------------------------------------------------------- */

static const double stage_bounds_s[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003,
                                         0.005,  0.0075,  0.01,   0.02,  0.05,  0.1 };

infd_status infd_video_metrics_render(infd_video *v, char **out, size_t *n, infd_error *err)
{
    infd_strbuf b;
    infd_strbuf_init(&b);
    infd_strbuf_puts(&b, "# HELP infd_video_stage_seconds Time of each stage per frame "
                         "(process: decoder input to encoder output)\n"
                         "# TYPE infd_video_stage_seconds histogram\n");
    for (int i = 0; i < VIDEO_N_STAGES; i++) {
        const infd_histogram *h = v->sh.stage[i];
        for (size_t k = 0; k < sizeof(stage_bounds_s) / sizeof(stage_bounds_s[0]); k++)
            infd_strbuf_printf(
                &b, "infd_video_stage_seconds_bucket{stage=\"%s\",le=\"%g\"} %" PRIu64 "\n",
                video_stage_names[i], stage_bounds_s[k],
                infd_histogram_count_le(h, (uint64_t)(stage_bounds_s[k] * 1e6)));
        infd_strbuf_printf(&b,
                           "infd_video_stage_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %" PRIu64
                           "\ninfd_video_stage_seconds_sum{stage=\"%s\"} %.6f\n"
                           "infd_video_stage_seconds_count{stage=\"%s\"} %" PRIu64 "\n",
                           video_stage_names[i], infd_histogram_count(h), video_stage_names[i],
                           infd_histogram_sum(h) / 1e6, video_stage_names[i],
                           infd_histogram_count(h));
    }
    struct {
        const char *name, *help;
        uint64_t value;
    } counters[] = {
        { "infd_video_frames_total", "Frames processed", atomic_load(&v->sh.frames) },
        { "infd_video_faces_total", "Faces detected", atomic_load(&v->sh.faces) },
        { "infd_video_decode_errors_total", "Corrupt packets and decode errors skipped",
          atomic_load(&v->sh.decode_errors) },
        { "infd_video_detector_errors_total", "Frames sent without boxes: the detector failed",
          atomic_load(&v->sh.infer_errors) },
        { "infd_video_packets_dropped_total", "Output chunks a viewer too slow to take them lost",
          atomic_load(&v->sh.packets_dropped) },
        { "infd_video_publishers_total", "Publisher connections started",
          atomic_load(&v->sh.publishers_total) },
        { "infd_video_viewers_total", "Viewer connections accepted",
          atomic_load(&v->sh.viewers_total) },
    };
    for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
        infd_strbuf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n",
                           counters[i].name, counters[i].help, counters[i].name, counters[i].name,
                           counters[i].value);
    int publishing = 0, viewers = 0, n_streams;
    pthread_mutex_lock(&v->lock);
    n_streams = v->n_streams;
    for (int i = 0; i < v->n_streams; i++) {
        video_stream_info info;
        video_stream_get_info(v->streams[i], &info);
        publishing += info.publishing;
        viewers += info.viewers;
    }
    pthread_mutex_unlock(&v->lock);
    infd_strbuf_printf(&b,
                       "# HELP infd_video_streams Streams known (named by a publisher or "
                       "viewer)\n# TYPE infd_video_streams gauge\ninfd_video_streams %d\n"
                       "# HELP infd_video_publishing Streams with a publisher now\n"
                       "# TYPE infd_video_publishing gauge\ninfd_video_publishing %d\n"
                       "# HELP infd_video_viewers Viewers connected now\n"
                       "# TYPE infd_video_viewers gauge\ninfd_video_viewers %d\n",
                       n_streams, publishing, viewers);
    if (b.oom) {
        infd_strbuf_fini(&b);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "video metrics: out of memory");
    }
    *out = infd_strbuf_take(&b, n);
    return INFD_STATUS_OK;
}

infd_status infd_video_streams_json(infd_video *v, char **out, size_t *n, infd_error *err)
{
    infd_strbuf b;
    infd_strbuf_init(&b);
    infd_strbuf_putc(&b, '[');
    pthread_mutex_lock(&v->lock);
    for (int i = 0; i < v->n_streams; i++) {
        video_stream_info info;
        video_stream_get_info(v->streams[i], &info);
        infd_strbuf_printf(&b,
                           "%s{\"name\":\"%s\",\"publishing\":%s,\"viewers\":%d,\"frames\":%" PRIu64
                           ",\"width\":%d,\"height\":%d,\"fps\":%.3f}",
                           i ? "," : "", video_stream_name(v->streams[i]),
                           info.publishing ? "true" : "false", info.viewers, info.frames,
                           info.width, info.height, info.fps);
    }
    pthread_mutex_unlock(&v->lock);
    infd_strbuf_putc(&b, ']');
    if (b.oom) {
        infd_strbuf_fini(&b);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "video streams: out of memory");
    }
    *out = infd_strbuf_take(&b, n);
    return INFD_STATUS_OK;
}
