/*
 * ingest.c - stream IDs, and SRT -> MPEG-TS demux -> H.264 decode
 * (ingest.h).
 *
 * Life of a publisher: video_ingest_open points a custom AVIO at the socket
 * and opens the mpegts demuxer, which reads until the PMT has named the
 * streams; the first H.264 video stream's decoder is opened from its
 * parameters. video_ingest_read then loops av_read_frame -> send_packet ->
 * receive_frame until a frame comes out. When the read callback reports the
 * end (the peer closed, the connection broke, or stop() said so), the
 * decoder is drained with a NULL packet so the frames it holds still come
 * out: frames in equal frames out.
 */
#include "apps/video/ingest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/hwcontext.h>
#include <libavutil/pixdesc.h>
#include <srt/srt.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

/* SRT live mode carries at most 1456 payload bytes a message (1316, seven
 * TS packets, by default). */
#define SRT_MSG_MAX 1500
/* The AVIO buffer: below FFmpeg's 32 KiB IO_BUFFER_SIZE every read asks
 * for the whole buffer, so messages are never split across reads. */
#define AVIO_BYTES (8 * 1316)

struct video_ingest {
    char stream[VIDEO_NAME_MAX + 1];
    int sock;
    int eid; /* SRT epoll with `sock`, for waiting without blocking in recv */
    video_ingest_stop_fn stop;
    void *user;
    bool ended; /* the read callback reported the end */
    bool draining;

    uint8_t msg[SRT_MSG_MAX]; /* one SRT message not yet handed to AVIO */
    int msg_len, msg_off;
    uint64_t recv_ns;        /* inside srt_recvmsg since the last frame */
    uint64_t wait_ns;        /* waiting for messages to arrive (not a cost) */
    uint64_t drain_until_ns; /* publisher gone: read what SRT holds until then; 0 before */

    AVFormatContext *fmt;
    AVIOContext *avio;
    AVCodecContext *dec;
    AVPacket *pkt;
    int video_index;
    AVBufferRef *hw; /* the CUDA device: decode with NVDEC; NULL: on the CPU */
    uint64_t errors;
    int error_run; /* demuxer errors since the last packet */
};

int video_srt_held(int sock)
{
    int32_t held = 0;
    int len = sizeof(held);
    return srt_getsockflag(sock, SRTO_RCVDATA, &held, &len) == 0 && held > 0 ? (int)held : 0;
}

infd_status video_srt_error(infd_error *err, const char *what)
{
    return infd_error_set(err, INFD_STATUS_IO, "%s: %s", what, srt_getlasterror_str());
}

infd_status video_av_error(infd_error *err, int averr, const char *what)
{
    char text[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(averr, text, sizeof(text));
    infd_status code = averr == AVERROR(ENOMEM)       ? INFD_STATUS_OUT_OF_MEMORY
                       : averr == AVERROR_INVALIDDATA ? INFD_STATUS_INVALID_ARGUMENT
                       : averr == AVERROR_EOF         ? INFD_STATUS_UNAVAILABLE
                       : averr == AVERROR_ENCODER_NOT_FOUND || averr == AVERROR_DECODER_NOT_FOUND
                           ? INFD_STATUS_UNIMPLEMENTED
                           : INFD_STATUS_INTERNAL;
    return infd_error_set(err, code, "%s: %s", what, text);
}

/* ------------------------------------------------------------------------- */
/* Stream IDs                                                                */
/* ------------------------------------------------------------------------- */

static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '/';
}

static infd_status set_name(video_streamid *out, const char *s, size_t n, infd_error *err)
{
    if (n == 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "empty stream name");
    if (n > VIDEO_NAME_MAX)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "stream name of %zu bytes (at most %d)", n, VIDEO_NAME_MAX);
    for (size_t i = 0; i < n; i++)
        if (!name_char(s[i]))
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "stream name: byte %zu (0x%02x) is not a letter, "
                                  "digit, '.', '_', '-' or '/'",
                                  i, (unsigned char)s[i]);
    memcpy(out->name, s, n);
    out->name[n] = '\0';
    return INFD_STATUS_OK;
}

infd_status video_streamid_parse(const char *sid, size_t n, const char *default_name,
                                 video_streamid *out, infd_error *err)
{
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return set_name(out, default_name, strlen(default_name), err);
    static const char prefix[] = "#!::";
    if (n < sizeof(prefix) - 1 || memcmp(sid, prefix, sizeof(prefix) - 1) != 0) {
        if (set_name(out, sid, n, err) != INFD_STATUS_OK)
            return infd_error_prefix(err, "stream id");
        return INFD_STATUS_OK;
    }

    /* Comma-separated key=value pairs (SRT's access-control syntax). Keys
     * other than r and m (u, h, s, t and custom x keys) are accepted and
     * not used. */
    bool have_r = false, have_m = false;
    size_t i = sizeof(prefix) - 1;
    while (i < n) {
        size_t start = i;
        while (i < n && sid[i] != ',')
            i++;
        const char *pair = sid + start;
        size_t len = i - start;
        const char *eq = memchr(pair, '=', len);
        if (!eq || eq == pair)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "stream id: byte %zu: expected key=value", start);
        size_t klen = (size_t)(eq - pair), vlen = len - klen - 1;
        const char *val = eq + 1;
        if (klen == 1 && pair[0] == 'r') {
            if (have_r)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "stream id: byte %zu: r= given twice", start);
            have_r = true;
            if (set_name(out, val, vlen, err) != INFD_STATUS_OK)
                return infd_error_prefix(err, "stream id: byte %zu", start);
        } else if (klen == 1 && pair[0] == 'm') {
            if (have_m)
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "stream id: byte %zu: m= given twice", start);
            have_m = true;
            if (vlen == 7 && memcmp(val, "publish", 7) == 0)
                out->role = VIDEO_ROLE_PUBLISH;
            else if (vlen == 7 && memcmp(val, "request", 7) == 0)
                out->role = VIDEO_ROLE_VIEW;
            else
                return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                      "stream id: byte %zu: mode '%.*s' is not publish or request",
                                      start, (int)(vlen > 32 ? 32 : vlen), val);
        }
        i++; /* past the comma */
        if (i == n && sid[n - 1] == ',')
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "stream id: ends with ','");
    }
    if (!have_r)
        return set_name(out, default_name, strlen(default_name), err);
    return INFD_STATUS_OK;
}

/* ------------------------------------------------------------------------- */
/* Reading a publisher                                                       */
/* ------------------------------------------------------------------------- */

infd_status video_ingest_create(const char *stream, const void *hw_device, video_ingest **out,
                                infd_error *err)
{
    *out = NULL;
    video_ingest *in = infd_calloc(1, sizeof(*in));
    if (!in)
        goto oom;
    snprintf(in->stream, sizeof(in->stream), "%s", stream);
    in->sock = SRT_INVALID_SOCK;
    in->eid = -1;
    if (hw_device && !(in->hw = av_buffer_ref((AVBufferRef *)hw_device)))
        goto oom;
    in->pkt = av_packet_alloc();
    if (!in->pkt)
        goto oom;
    *out = in;
    return INFD_STATUS_OK;
oom:
    video_ingest_destroy(in);
    return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY,
                          "stream %s: out of memory making its "
                          "reader",
                          stream);
}

void video_ingest_destroy(video_ingest *in)
{
    if (!in)
        return;
    video_ingest_close(in);
    av_packet_free(&in->pkt);
    av_buffer_unref(&in->hw);
    infd_free(in);
}

/* After the publisher has gone: true when messages it sent are still held
 * in the receive buffer, which the caller should wait for and read.
 *
 * In live mode the receiver holds each message for the latency (TSBPD)
 * before srt_recvmsg hands it over. Once the peer has closed, libsrt
 * 1.5.1 (CUDT::receiveMessage) hands over only messages already due, and
 * answers SRT_ECONNLOST while the rest wait: the last `latency` ms of every
 * stream, more when the machine is loaded. They stay readable (SRTO_RCVDATA
 * counts them; the socket is kept while it holds data), and each becomes
 * due within the latency. So this waits, 2 ms at a time, at most the
 * latency and 100 ms more. */
static bool read_held(video_ingest *in)
{
    int held = video_srt_held(in->sock);
    if (!held)
        return false;
    uint64_t now = infd_clock_ns();
    if (!in->drain_until_ns) {
        int32_t latency = 0;
        int len = sizeof(latency);
        if (srt_getsockflag(in->sock, SRTO_RCVLATENCY, &latency, &len) != 0 || latency < 0)
            latency = 0;
        in->drain_until_ns = now + ((uint64_t)latency + 100) * 1000000;
    }
    if (now > in->drain_until_ns) {
        infd_log(INFD_LOG_LEVEL_WARN,
                 "video: stream %s: %d messages still held after the publisher left, past the "
                 "latency and 100 ms; dropped",
                 in->stream, held);
        return false;
    }
    infd_clock_sleep_us(2000);
    return true;
}

/* The AVIO read callback: one SRT message at a time (or what is left of
 * one), waiting in the epoll 100 ms at a time so stop() is polled. */
static int read_cb(void *opaque, uint8_t *buf, int size)
{
    video_ingest *in = opaque;
    while (in->msg_off >= in->msg_len) {
        if (in->ended || in->stop(in->user)) {
            in->ended = true;
            return AVERROR_EOF;
        }
        uint64_t t0 = infd_clock_ns();
        int n = srt_recvmsg(in->sock, (char *)in->msg, sizeof(in->msg));
        if (n > 0) {
            in->recv_ns += infd_clock_ns() - t0;
            in->msg_len = n;
            in->msg_off = 0;
            break;
        }
        if (n == SRT_ERROR && srt_getlasterror(NULL) == SRT_EASYNCRCV) {
            SRTSOCKET ready[1];
            int n_ready = 1;
            uint64_t w0 = infd_clock_ns();
            srt_epoll_wait(in->eid, ready, &n_ready, NULL, NULL, 100, NULL, NULL, NULL, NULL);
            in->wait_ns += infd_clock_ns() - w0;
            continue;
        }
        /* 0 (closed) or a broken connection; what the publisher sent
         * before it left is read first. */
        if (n == SRT_ERROR && srt_getlasterror(NULL) == SRT_ECONNLOST && read_held(in))
            continue;
        infd_log(INFD_LOG_LEVEL_INFO, "video: stream %s: publisher gone (%s)", in->stream,
                 n == 0 ? "closed" : srt_getlasterror_str());
        in->ended = true;
        return AVERROR_EOF;
    }
    int take = in->msg_len - in->msg_off;
    if (take > size)
        take = size;
    memcpy(buf, in->msg + in->msg_off, (size_t)take);
    in->msg_off += take;
    return take;
}

/* The decoder offers its formats: CUDA frames when NVDEC can take the
 * stream, else the software format it would decode to. */
static enum AVPixelFormat pick_cuda(AVCodecContext *ctx, const enum AVPixelFormat *fmts)
{
    (void)ctx;
    enum AVPixelFormat sw = AV_PIX_FMT_NONE;
    for (const enum AVPixelFormat *f = fmts; *f != AV_PIX_FMT_NONE; f++) {
        if (*f == AV_PIX_FMT_CUDA)
            return *f;
        const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(*f);
        if (d && !(d->flags & AV_PIX_FMT_FLAG_HWACCEL))
            sw = *f;
    }
    return sw != AV_PIX_FMT_NONE ? sw : fmts[0];
}

static int interrupt_cb(void *opaque)
{
    video_ingest *in = opaque;
    return in->stop(in->user);
}

infd_status video_ingest_open(video_ingest *in, int sock, video_ingest_stop_fn stop, void *user,
                              infd_error *err)
{
    video_ingest_close(in);
    in->sock = sock;
    in->stop = stop;
    in->user = user;
    in->ended = in->draining = false;
    in->msg_len = in->msg_off = 0;
    in->recv_ns = in->drain_until_ns = 0;
    in->error_run = 0;
    infd_status st = INFD_STATUS_OUT_OF_MEMORY;
    AVDictionary *opts = NULL;
    bool no = false;
    srt_setsockflag(sock, SRTO_RCVSYN, &no, sizeof(no));
    in->eid = srt_epoll_create();
    int events = SRT_EPOLL_IN | SRT_EPOLL_ERR;
    if (in->eid < 0 || srt_epoll_add_usock(in->eid, sock, &events) != 0) {
        st = video_srt_error(err, "epoll");
        goto fail;
    }
    uint8_t *buf = av_malloc(AVIO_BYTES);
    if (!buf)
        goto oom;
    in->avio = avio_alloc_context(buf, AVIO_BYTES, 0, in, read_cb, NULL, NULL);
    if (!in->avio) {
        av_free(buf);
        goto oom;
    }
    in->fmt = avformat_alloc_context();
    if (!in->fmt)
        goto oom;
    in->fmt->pb = in->avio;
    /* Corrupt packets (TS continuity errors) still go to the decoder: it
     * conceals what it cannot decode, and the frames after it keep their
     * reference. Dropping them would lose a frame each. */
    in->fmt->flags |= AVFMT_FLAG_CUSTOM_IO | AVFMT_FLAG_NOBUFFER;
    in->fmt->interrupt_callback.callback = interrupt_cb;
    in->fmt->interrupt_callback.opaque = in;
    av_dict_set(&opts, "probesize", "1000000", 0);
    int rc = avformat_open_input(&in->fmt, NULL, av_find_input_format("mpegts"), &opts);
    av_dict_free(&opts);
    if (rc < 0) {
        in->fmt = NULL; /* freed by avformat_open_input on failure */
        st = in->ended ? infd_error_set(err, INFD_STATUS_UNAVAILABLE,
                                        "the publisher left before its stream started")
                       : video_av_error(err, rc, "not an MPEG transport stream");
        goto fail;
    }
    in->video_index = -1;
    for (unsigned i = 0; i < in->fmt->nb_streams; i++) {
        AVCodecParameters *par = in->fmt->streams[i]->codecpar;
        if (par->codec_type == AVMEDIA_TYPE_VIDEO && par->codec_id == AV_CODEC_ID_H264) {
            in->video_index = (int)i;
            break;
        }
    }
    if (in->video_index < 0) {
        st = infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                            "the transport stream has no H.264 video (%u streams)",
                            in->fmt->nb_streams);
        goto fail;
    }
    for (unsigned i = 0; i < in->fmt->nb_streams; i++)
        if ((int)i != in->video_index)
            in->fmt->streams[i]->discard = AVDISCARD_ALL;
    const AVCodec *codec = avcodec_find_decoder(AV_CODEC_ID_H264);
    in->dec = avcodec_alloc_context3(codec);
    if (!in->dec)
        goto oom;
    avcodec_parameters_to_context(in->dec, in->fmt->streams[in->video_index]->codecpar);
    if (in->hw) {
        in->dec->hw_device_ctx = av_buffer_ref(in->hw);
        in->dec->get_format = pick_cuda;
    }
    /* One thread and low delay: frame threading would hold frames back.
     * (Slice threads did not speed up x264 zerolatency key frames, the
     * slowest frames, on 2 cores: measured, bench/RESULTS.md.) */
    in->dec->thread_count = 1;
    in->dec->flags |= AV_CODEC_FLAG_LOW_DELAY;
    in->dec->pkt_timebase = in->fmt->streams[in->video_index]->time_base;
    rc = avcodec_open2(in->dec, codec, NULL);
    if (rc < 0) {
        st = video_av_error(err, rc, "H.264 decoder");
        goto fail;
    }
    return INFD_STATUS_OK;
oom:
    st = infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory opening the demuxer");
fail:
    video_ingest_close(in);
    infd_error_prefix(err, "stream %s", in->stream);
    return st;
}

int video_ingest_read(video_ingest *in, AVFrame *frame, video_ingest_timing *t)
{
    memset(t, 0, sizeof(*t));
    av_frame_unref(frame);
    if (!in->dec)
        return 0;
    for (;;) {
        int rc = avcodec_receive_frame(in->dec, frame);
        if (rc == 0) {
            t->receive_ns = in->recv_ns;
            in->recv_ns = 0;
            return 1;
        }
        if (rc == AVERROR_EOF)
            return 0;
        if (in->draining)
            return 0; /* EAGAIN after the flush packet: nothing more */
        uint64_t t0 = infd_clock_ns(), r0 = in->recv_ns, w0 = in->wait_ns;
        rc = av_read_frame(in->fmt, in->pkt);
        uint64_t t1 = infd_clock_ns();
        t->demux_ns += (t1 - t0) - (in->recv_ns - r0) - (in->wait_ns - w0);
        if (rc < 0) {
            /* The demuxer resynchronises by itself; an error it returns
             * is skipped, unless errors come back to back (the input is
             * not recovering). */
            if (!in->ended && rc != AVERROR_EOF && rc != AVERROR_EXIT && ++in->error_run < 64) {
                in->errors++;
                char text[AV_ERROR_MAX_STRING_SIZE];
                av_strerror(rc, text, sizeof(text));
                infd_log(INFD_LOG_LEVEL_WARN, "video: stream %s: demuxer: %s (skipped)", in->stream,
                         text);
                continue;
            }
            /* The end: drain the decoder. */
            in->draining = true;
            t->decode_in = t1;
            avcodec_send_packet(in->dec, NULL);
            t->decode_ns += infd_clock_ns() - t1;
            continue;
        }
        in->error_run = 0;
        if (in->pkt->stream_index != in->video_index) {
            av_packet_unref(in->pkt);
            continue;
        }
        if (in->pkt->flags & AV_PKT_FLAG_CORRUPT) {
            if (in->errors < 10 || in->errors % 100 == 0)
                infd_log(INFD_LOG_LEVEL_WARN,
                         "video: stream %s: packet at pts %" PRId64 " is corrupt (TS "
                         "continuity error): decoded with concealment",
                         in->stream, in->pkt->pts);
            in->errors++;
        }
        t->decode_in = t1;
        rc = avcodec_send_packet(in->dec, in->pkt);
        av_packet_unref(in->pkt);
        t->decode_ns += infd_clock_ns() - t1;
        if (rc < 0 && rc != AVERROR(EAGAIN)) {
            in->errors++;
            char text[AV_ERROR_MAX_STRING_SIZE];
            av_strerror(rc, text, sizeof(text));
            infd_log(INFD_LOG_LEVEL_WARN, "video: stream %s: decoder: %s (packet skipped)",
                     in->stream, text);
        }
        uint64_t t2 = infd_clock_ns();
        rc = avcodec_receive_frame(in->dec, frame);
        t->decode_ns += infd_clock_ns() - t2;
        if (rc == 0) {
            t->receive_ns = in->recv_ns;
            in->recv_ns = 0;
            return 1;
        }
    }
}

double video_ingest_fps(const video_ingest *in)
{
    if (in->dec && in->dec->framerate.num > 0 && in->dec->framerate.den > 0) {
        double fps = av_q2d(in->dec->framerate);
        if (fps >= 1 && fps <= 240)
            return fps;
    }
    return 30.0;
}

int64_t video_ingest_pts_rate(const video_ingest *in)
{
    if (in->fmt && in->video_index >= 0) {
        AVRational tb = in->fmt->streams[in->video_index]->time_base;
        if (tb.num == 1 && tb.den > 0)
            return tb.den;
    }
    return 90000;
}

bool video_ingest_publisher_gone(const video_ingest *in)
{
    return in->drain_until_ns != 0;
}

uint64_t video_ingest_errors(const video_ingest *in)
{
    return in->errors;
}

void video_ingest_close(video_ingest *in)
{
    avcodec_free_context(&in->dec);
    if (in->fmt)
        avformat_close_input(&in->fmt);
    if (in->avio) {
        av_freep(&in->avio->buffer);
        avio_context_free(&in->avio);
    }
    if (in->eid >= 0)
        srt_epoll_release(in->eid);
    in->eid = -1;
    in->sock = SRT_INVALID_SOCK;
}
