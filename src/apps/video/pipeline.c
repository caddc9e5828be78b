/*
 * pipeline.c - a live stream's frame loop (pipeline.h).
 *
 * Life of a frame, all on the stream's thread:
 *   ingest     SRT message -> TS demux -> H.264 decode (ingest.c)
 *   copy       the decoder's frame into the stream's own 4:2:0 frame (the
 *              decoder's buffers are its reference pictures: drawing on
 *              them would corrupt the frames that follow)
 *   preprocess libswscale to RGB at the letterbox size, then [-1, 1] floats
 *   infer      one request to the served detector (infd_infer), which the
 *              dynamic batcher may batch with other streams' frames
 *   postprocess anchors and weighted NMS (detect.c)
 *   draw       boxes and dots into the frame (draw.c)
 *   encode     libx264, zerolatency, no B-frames, a key frame every second
 *   send       mpegts mux into a 1316-byte AVIO buffer whose write callback
 *              sends each chunk to every viewer (srt_sendmsg, non-blocking)
 *   report     the detections JSON line and the stage histograms
 *
 * Memory: the frames, packet, RGB image, input tensor and NMS scratch are
 * sized when the first frame (or a new frame size) arrives and then reused;
 * the request comes from the model's free list. Steady frames allocate only
 * inside FFmpeg and x264.
 */
#include "apps/video/pipeline.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
#include <srt/srt.h>

#include "apps/video/draw.h"
#include "apps/video/gpu.h"
#include "apps/video/ingest.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/log.h"

const char *const video_stage_names[VIDEO_N_STAGES] = {
#define VIDEO_STAGE_NAME_(name, str) str,
    VIDEO_STAGES(VIDEO_STAGE_NAME_)
#undef VIDEO_STAGE_NAME_
};

#define MUX_BYTES 1316 /* 7 TS packets: SRT live mode's message size */

struct video_stream {
    video_shared *sh;
    char name[VIDEO_NAME_MAX + 1];
    pthread_t thread;
    bool started;

    pthread_mutex_t lock; /* guards the fields up to the blank line */
    pthread_cond_t wake;
    int next_pub; /* a publisher waiting to start, or SRT_INVALID_SOCK */
    int pub;      /* the one streaming now */
    int viewers[VIDEO_MAX_VIEWERS];
    int n_viewers;
    bool force_key; /* a viewer joined: encode the next frame as a key frame */
    int gop;        /* frames between key frames (about a second) */
    int since_key;  /* frames encoded since the last key frame */
    uint64_t frames;
    int width, height;
    double fps;

    video_ingest *in;
    AVFrame *decoded, *work;
    struct SwsContext *to_rgb, *to_yuv;
    uint8_t *rgb;
    int rgb_stride;
    video_letterbox lb;
    float *input;
    void *scratch;
    video_face faces[VIDEO_MAX_FACES];

    /* The GPU path (frames in device memory): its buffers, the host frame
     * the encoder reads, and the rectangles to draw. */
    video_gpu *gpu;
    video_nv12 gpu_host;
    float *gpu_input; /* device memory, the detector's input */
    video_rect *rects;
    AVFrame *host_frame;
    int gpu_w, gpu_h;

    AVCodecContext *enc;
    AVPacket *enc_pkt;
    AVFormatContext *mux;
    AVStream *mux_stream;
    bool mux_started;
    int64_t pts_offset, last_pts, frame_dur; /* output PTS, 90 kHz */
    bool session_first;                      /* the next frame is a publisher's first */
    bool have_last_pts;

    uint64_t send_ns; /* in the mux write callback, this frame */
    uint64_t window_sum[VIDEO_N_STAGES];
    infd_histogram *window; /* this stream's process times since the last log */
    uint64_t window_start_ns;
    char json[32768]; /* a frame's detections line: VIDEO_MAX_FACES faces fit */
};

/* ------------------------------------------------------------------------- */
/* Output                                                                    */
/* ------------------------------------------------------------------------- */

/* The muxer's write callback: one chunk of at most MUX_BYTES to every
 * viewer. Non-blocking sends; a full send buffer drops the chunk for that
 * viewer only. A broken viewer fails here too and is reaped by the accept
 * thread, which sees the error on its epoll. */
static int mux_write(void *opaque, uint8_t *buf, int size)
{
    video_stream *s = opaque;
    uint64_t t0 = infd_clock_ns();
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_viewers; i++) {
        if (srt_sendmsg2(s->viewers[i], (const char *)buf, size, NULL) == SRT_ERROR &&
            srt_getlasterror(NULL) == SRT_EASYNCSND)
            atomic_fetch_add(&s->sh->packets_dropped, 1);
    }
    pthread_mutex_unlock(&s->lock);
    s->send_ns += infd_clock_ns() - t0;
    return size;
}

static void close_encoder(video_stream *s)
{
    avcodec_free_context(&s->enc);
}

/* Opens the encoder (libx264, or NVENC) for w x h frames of `pix_fmt`,
 * and the muxer the first time. */
static infd_status open_encoder(video_stream *s, int w, int h, double fps,
                                enum AVPixelFormat pix_fmt, infd_error *err)
{
    close_encoder(s);
    bool nvenc = strcmp(s->sh->encoder, "h264_nvenc") == 0;
    const AVCodec *codec = avcodec_find_encoder_by_name(s->sh->encoder);
    if (!codec)
        return infd_error_set(err, INFD_STATUS_UNIMPLEMENTED, "FFmpeg here has no %s encoder",
                              s->sh->encoder);
    s->enc = avcodec_alloc_context3(codec);
    if (!s->enc)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the encoder");
    AVCodecContext *e = s->enc;
    e->width = w;
    e->height = h;
    e->pix_fmt = pix_fmt;
    e->time_base = (AVRational){ 1, 90000 };
    e->framerate = av_d2q(fps, 1000);
    /* Key frames about once a second, placed by process(): x264's own
     * interval is only the backstop. */
    s->gop = (int)lround(fps);
    e->gop_size = 2 * s->gop;
    e->max_b_frames = 0;
    e->bit_rate = (int64_t)s->sh->bitrate_kbps * 1000;
    e->flags |= AV_CODEC_FLAG_LOW_DELAY;
    e->thread_count = s->sh->encoder_threads;
    if (nvenc) {
        /* NVENC's low-latency settings: fastest preset, ultra-low-latency
         * tuning, no lookahead or reordering. */
        av_opt_set(e->priv_data, "preset", "p1", 0);
        av_opt_set(e->priv_data, "tune", "ull", 0);
        av_opt_set(e->priv_data, "zerolatency", "1", 0);
        av_opt_set(e->priv_data, "delay", "0", 0);
    } else {
        av_opt_set(e->priv_data, "preset", s->sh->x264_preset, 0);
        av_opt_set(e->priv_data, "tune", "zerolatency", 0);
    }
    int rc = avcodec_open2(e, codec, NULL);
    if (rc < 0)
        return video_av_error(err, rc, s->sh->encoder);

    if (!s->mux) {
        rc = avformat_alloc_output_context2(&s->mux, NULL, "mpegts", NULL);
        if (rc < 0)
            return video_av_error(err, rc, "mpegts muxer");
        uint8_t *buf = av_malloc(MUX_BYTES);
        AVIOContext *pb =
            buf ? avio_alloc_context(buf, MUX_BYTES, 1, s, NULL, mux_write, NULL) : NULL;
        if (!pb) {
            av_free(buf);
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the muxer");
        }
        s->mux->pb = pb;
        s->mux->flags |= AVFMT_FLAG_CUSTOM_IO | AVFMT_FLAG_FLUSH_PACKETS;
        s->mux->max_delay = 0;
        s->mux_stream = avformat_new_stream(s->mux, NULL);
        if (!s->mux_stream)
            return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for the muxer");
        s->mux_stream->time_base = (AVRational){ 1, 90000 };
    }
    avcodec_parameters_from_context(s->mux_stream->codecpar, e);
    if (!s->mux_started) {
        rc = avformat_write_header(s->mux, NULL);
        if (rc < 0)
            return video_av_error(err, rc, "mpegts muxer");
        s->mux_started = true;
    }
    return INFD_STATUS_OK;
}

/* Muxes every packet the encoder has ready; the time of the first one
 * (encoder output) in *t_out when not yet set. */
static void drain_encoder(video_stream *s, uint64_t *t_out, uint64_t *encode_ns)
{
    for (;;) {
        uint64_t t0 = infd_clock_ns();
        int rc = avcodec_receive_packet(s->enc, s->enc_pkt);
        uint64_t t1 = infd_clock_ns();
        *encode_ns += t1 - t0;
        if (rc < 0)
            return;
        if (t_out && !*t_out)
            *t_out = t1;
        s->since_key = (s->enc_pkt->flags & AV_PKT_FLAG_KEY) ? 0 : s->since_key + 1;
        av_packet_rescale_ts(s->enc_pkt, s->enc->time_base, s->mux_stream->time_base);
        s->enc_pkt->stream_index = s->mux_stream->index;
        int wr = av_write_frame(s->mux, s->enc_pkt);
        av_packet_unref(s->enc_pkt);
        if (wr < 0) {
            char text[AV_ERROR_MAX_STRING_SIZE];
            av_strerror(wr, text, sizeof(text));
            infd_log(INFD_LOG_LEVEL_WARN, "video: stream %s: muxer: %s", s->name, text);
        }
        avio_flush(s->mux->pb);
    }
}

/* ------------------------------------------------------------------------- */
/* One frame                                                                 */
/* ------------------------------------------------------------------------- */

/* Sizes the per-frame buffers for w x h (first frame, or a new size). */
static infd_status resize(video_stream *s, int w, int h, infd_error *err)
{
    av_frame_unref(s->work);
    s->work->format = AV_PIX_FMT_YUV420P;
    s->work->width = w;
    s->work->height = h;
    int rc = av_frame_get_buffer(s->work, 0);
    if (rc < 0)
        return video_av_error(err, rc, "frame buffer");
    s->lb = video_letterbox_make(w, h, s->sh->input_size);
    s->rgb_stride = (s->lb.w * 3 + 63) & ~63;
    infd_free(s->rgb);
    s->rgb = infd_calloc((size_t)s->rgb_stride, (size_t)s->lb.h);
    if (!s->rgb)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for a %dx%d frame", w,
                              h);
    return INFD_STATUS_OK;
}

/* Runs the detector on `input` (host memory, or device memory on CUDA
 * device `device` when that is >= 0); the faces found in s->faces. */
static int detect(video_stream *s, const float *input, int device, uint64_t frame_no,
                  uint64_t *infer_ns, uint64_t *post_ns)
{
    uint64_t t0 = infd_clock_ns(), t1 = 0;
    video_shared *sh = s->sh;
    infd_request *req = NULL;
    infd_error err;
    infd_error_clear(&err);
    int n = -1;
    int S = sh->input_size;
    int64_t shape[4] = { 1, S, S, 3 };
    size_t bytes = (size_t)S * S * 3 * sizeof(float);
    if (infd_request_create(sh->model, &req, &err) != INFD_STATUS_OK ||
        (device >= 0 ? infd_request_add_input_device(req, sh->input_name, INFD_DTYPE_FP32, shape, 4,
                                                     input, bytes, device, &err)
                     : infd_request_add_input(req, sh->input_name, INFD_DTYPE_FP32, shape, 4, input,
                                              bytes, &err)) != INFD_STATUS_OK ||
        infd_infer(req, &err) != INFD_STATUS_OK)
        goto out;
    t1 = infd_clock_ns();
    video_detector_outputs o = { 0 };
    for (int i = 0; i < infd_request_n_outputs(req); i++) {
        const char *name;
        infd_tensor t;
        if (infd_request_output(req, i, &name, &t) != INFD_STATUS_OK)
            continue;
        if (strcmp(name, sh->out_scores16) == 0)
            o.scores16 = t.data;
        else if (strcmp(name, sh->out_boxes16) == 0)
            o.boxes16 = t.data;
        else if (strcmp(name, sh->out_scores8) == 0)
            o.scores8 = t.data;
        else if (strcmp(name, sh->out_boxes8) == 0)
            o.boxes8 = t.data;
    }
    if (!o.scores16 || !o.boxes16 || !o.scores8 || !o.boxes8) {
        infd_error_set(&err, INFD_STATUS_INTERNAL, "the detector's response lacks an output");
        goto out;
    }
    n = video_detect_decode(&o, &s->lb, &sh->detect, s->scratch, s->faces, VIDEO_MAX_FACES);
out:
    if (!t1)
        t1 = infd_clock_ns();
    *infer_ns = t1 - t0;
    *post_ns = infd_clock_ns() - t1;
    if (n < 0) {
        uint64_t k = atomic_fetch_add(&sh->infer_errors, 1);
        if (k < 10 || k % 1000 == 0)
            infd_log(INFD_LOG_LEVEL_WARN,
                     "video: stream %s: frame %" PRIu64 ": detector: %s (frame sent without "
                     "boxes)",
                     s->name, frame_no, err.msg);
    }
    infd_request_destroy(req);
    return n;
}

static void put_json(video_stream *s, size_t *len, const char *fmt, ...) INFD_PRINTF(3, 4);
static void put_json(video_stream *s, size_t *len, const char *fmt, ...)
{
    if (*len >= sizeof(s->json))
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(s->json + *len, sizeof(s->json) - *len, fmt, ap);
    va_end(ap);
    *len += n > 0 ? (size_t)n : 0;
}

/* The frame's JSON line (docs/VIDEO.md, "Detections"). Stream names are
 * checked to need no escaping (ingest.c). */
static void report_json(video_stream *s, uint64_t frame_no, int64_t pts, bool input_key, int n,
                        const uint64_t *ns)
{
    video_shared *sh = s->sh;
    size_t len = 0;
    put_json(s, &len,
             "{\"stream\":\"%s\",\"frame\":%" PRIu64 ",\"pts\":%" PRId64 ",\"time_ms\":%" PRIu64
             ",\"width\":%d,\"height\":%d,\"input_key\":%s,\"faces\":[",
             s->name, frame_no, pts, infd_clock_realtime_ns() / 1000000, s->width, s->height,
             input_key ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const video_face *f = &s->faces[i];
        put_json(s, &len, "%s{\"score\":%.4f,\"box\":[%.1f,%.1f,%.1f,%.1f],\"landmarks\":[",
                 i ? "," : "", f->score, f->x0, f->y0, f->x1, f->y1);
        for (int k = 0; k < VIDEO_KEYPOINTS; k++)
            put_json(s, &len, "%s[%.1f,%.1f]", k ? "," : "", f->kp[k][0], f->kp[k][1]);
        put_json(s, &len, "]}");
    }
    put_json(s, &len, "],\"latency_us\":{");
    for (int i = 0; i < VIDEO_N_STAGES; i++)
        put_json(s, &len, "%s\"%s\":%.1f", i ? "," : "", video_stage_names[i], ns[i] / 1e3);
    put_json(s, &len, "}}\n");
    if (len >= sizeof(s->json))
        return; /* cannot happen with VIDEO_MAX_FACES faces; never a cut line */
    if (sh->detections) {
        pthread_mutex_lock(&sh->detections_lock);
        fwrite(s->json, 1, len, sh->detections);
        fflush(sh->detections);
        pthread_mutex_unlock(&sh->detections_lock);
    }
    if (atomic_load(&sh->subscribers) > 0 && sh->on_detections)
        sh->on_detections(sh->user, s->name, s->json, len - 1); /* without the newline */
}

static void record(video_stream *s, const uint64_t *ns)
{
    video_shared *sh = s->sh;
    for (int i = 0; i < VIDEO_N_STAGES; i++) {
        infd_histogram_record(sh->stage[i], ns[i] / 1000);
        s->window_sum[i] += ns[i];
    }
    infd_histogram_record(s->window, ns[VIDEO_STAGE_PROCESS] / 1000);
    uint64_t n = infd_histogram_count(s->window);
    if (sh->stats_every <= 0 || n < (uint64_t)sh->stats_every)
        return;
    uint64_t now = infd_clock_ns();
    double secs = (now - s->window_start_ns) / 1e9;
    char stages[512];
    size_t len = 0;
    for (int i = 0; i < VIDEO_STAGE_PROCESS && len < sizeof(stages); i++) {
        int k = snprintf(stages + len, sizeof(stages) - len, " %s %.2f", video_stage_names[i],
                         s->window_sum[i] / 1e6 / (double)n);
        len += k > 0 ? (size_t)k : 0;
    }
    infd_log(INFD_LOG_LEVEL_INFO,
             "video: stream %s: %" PRIu64 " frames, %.1f fps; process (decoder in to encoder "
             "out) p50 %.2f ms p99 %.2f ms max %.2f ms; mean ms:%s",
             s->name, n, secs > 0 ? n / secs : 0.0, infd_histogram_quantile(s->window, 0.5) / 1e3,
             infd_histogram_quantile(s->window, 0.99) / 1e3, infd_histogram_max(s->window) / 1e3,
             stages);
    infd_histogram_reset(s->window);
    memset(s->window_sum, 0, sizeof(s->window_sum));
    s->window_start_ns = now;
}

/* The output PTS of a decoded frame (90 kHz): the input's, moved after the
 * previous publisher's last frame when a new publisher starts, and kept
 * strictly increasing. */
static int64_t output_pts(video_stream *s, const AVFrame *f, int64_t in_rate)
{
    int64_t in = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
    int64_t pts = AV_NOPTS_VALUE;
    if (in != AV_NOPTS_VALUE) {
        in = av_rescale(in, 90000, in_rate);
        if (s->session_first)
            s->pts_offset = s->have_last_pts ? s->last_pts + s->frame_dur - in : 0;
        pts = in + s->pts_offset;
    }
    s->session_first = false;
    if (pts == AV_NOPTS_VALUE || (s->have_last_pts && pts <= s->last_pts))
        pts = s->have_last_pts ? s->last_pts + s->frame_dur : 0;
    s->last_pts = pts;
    s->have_last_pts = true;
    return pts;
}

/* The page-locked host frame belongs to gpu.c; the encoder only
 * references it (libx264 copies the picture in before send returns). */
static void keep_buffer(void *opaque, uint8_t *data)
{
    (void)opaque;
    (void)data;
}

/* Sizes the GPU path's buffers for w x h: device frame, page-locked host
 * frame (wrapped as the encoder's NV12 input) and input. */
static infd_status gpu_resize(video_stream *s, int w, int h, infd_error *err)
{
    s->lb = video_letterbox_make(w, h, s->sh->input_size);
    if (video_gpu_resize(s->gpu, w, h, &s->lb, &s->gpu_host, &s->gpu_input, err) != INFD_STATUS_OK)
        return err->code;
    av_frame_unref(s->host_frame);
    AVFrame *hf = s->host_frame;
    hf->format = AV_PIX_FMT_NV12;
    hf->width = w;
    hf->height = h;
    hf->data[0] = s->gpu_host.y;
    hf->data[1] = s->gpu_host.uv;
    hf->linesize[0] = s->gpu_host.pitch_y;
    hf->linesize[1] = s->gpu_host.pitch_uv;
    /* Reference-counted, so the encoder takes a reference instead of
     * copying the frame into a new buffer each time. */
    size_t bytes = (size_t)(s->gpu_host.uv - s->gpu_host.y) +
                   (size_t)s->gpu_host.pitch_uv * (size_t)((h + 1) / 2);
    hf->buf[0] = av_buffer_create(s->gpu_host.y, bytes, keep_buffer, NULL, 0);
    if (!hf->buf[0])
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory for a frame");
    s->gpu_w = w;
    s->gpu_h = h;
    return INFD_STATUS_OK;
}

/* The frame's own copy, detector input and faces, drawn, on the CPU or on
 * the GPU; the frame the encoder takes, or NULL when the frame is lost. */
static AVFrame *detect_and_draw(video_stream *s, AVFrame *f, uint64_t frame_no, uint64_t *ns,
                                int *n_faces)
{
    uint64_t t = infd_clock_ns();
    *n_faces = 0;
    if (f->format == AV_PIX_FMT_CUDA) {
        infd_error err;
        infd_error_clear(&err);
        video_nv12 src = { f->data[0],     f->data[1], f->linesize[0],
                           f->linesize[1], f->width,   f->height };
        if (video_gpu_preprocess(s->gpu, &src, &s->lb, &err) != INFD_STATUS_OK) {
            infd_log(INFD_LOG_LEVEL_ERROR, "video: stream %s: frame %" PRIu64 ": %s", s->name,
                     frame_no, err.msg);
            return NULL;
        }
        uint64_t t1 = infd_clock_ns();
        ns[VIDEO_STAGE_PREPROCESS] = t1 - t;
        /* The input stays on the GPU (video_gpu_device's device 0). */
        int n = detect(s, s->gpu_input, 0, frame_no, &ns[VIDEO_STAGE_INFER],
                       &ns[VIDEO_STAGE_POSTPROCESS]);
        *n_faces = n < 0 ? 0 : n;
        uint64_t t2 = infd_clock_ns();
        int n_rects = video_draw_rects(f->width, f->height, s->faces, *n_faces, s->rects,
                                       VIDEO_DRAW_MAX_RECTS);
        /* The drawing, and the finished frame's one download. */
        if (video_gpu_draw(s->gpu, &src, s->rects, n_rects, &err) != INFD_STATUS_OK) {
            infd_log(INFD_LOG_LEVEL_ERROR, "video: stream %s: frame %" PRIu64 ": %s", s->name,
                     frame_no, err.msg);
            return NULL;
        }
        ns[VIDEO_STAGE_DRAW] = infd_clock_ns() - t2;
        return s->host_frame;
    }

    /* The stream's own copy of the picture, 4:2:0. */
    av_frame_make_writable(s->work);
    if (f->format == AV_PIX_FMT_YUV420P || f->format == AV_PIX_FMT_YUVJ420P) {
        av_frame_copy(s->work, f);
    } else {
        s->to_yuv =
            sws_getCachedContext(s->to_yuv, f->width, f->height, f->format, f->width, f->height,
                                 AV_PIX_FMT_YUV420P, SWS_BILINEAR, NULL, NULL, NULL);
        if (!s->to_yuv)
            return NULL;
        sws_scale(s->to_yuv, (const uint8_t *const *)f->data, f->linesize, 0, f->height,
                  s->work->data, s->work->linesize);
    }
    s->work->color_range = f->color_range;

    /* Preprocess: RGB at the letterbox size, then the input tensor. */
    s->to_rgb = sws_getCachedContext(s->to_rgb, f->width, f->height, s->work->format, s->lb.w,
                                     s->lb.h, AV_PIX_FMT_RGB24, SWS_BILINEAR, NULL, NULL, NULL);
    if (!s->to_rgb)
        return NULL;
    uint8_t *dst[4] = { s->rgb, NULL, NULL, NULL };
    int dst_stride[4] = { s->rgb_stride, 0, 0, 0 };
    sws_scale(s->to_rgb, (const uint8_t *const *)s->work->data, s->work->linesize, 0, f->height,
              dst, dst_stride);
    video_letterbox_fill(&s->lb, s->rgb, s->rgb_stride, s->input);
    uint64_t t1 = infd_clock_ns();
    ns[VIDEO_STAGE_PREPROCESS] = t1 - t; /* the copy included */

    int n = detect(s, s->input, -1, frame_no, &ns[VIDEO_STAGE_INFER], &ns[VIDEO_STAGE_POSTPROCESS]);
    *n_faces = n < 0 ? 0 : n;
    uint64_t t2 = infd_clock_ns();
    video_yuv img = { s->work->data[0],     s->work->data[1],     s->work->data[2],
                      s->work->linesize[0], s->work->linesize[1], s->work->linesize[2],
                      s->work->width,       s->work->height };
    video_draw_faces(&img, s->faces, *n_faces);
    ns[VIDEO_STAGE_DRAW] = infd_clock_ns() - t2;
    return s->work;
}

static void process(video_stream *s, const video_ingest_timing *it)
{
    video_shared *sh = s->sh;
    AVFrame *f = s->decoded;
    uint64_t ns[VIDEO_N_STAGES] = { 0 };
    ns[VIDEO_STAGE_RECEIVE] = it->receive_ns;
    ns[VIDEO_STAGE_DEMUX] = it->demux_ns;
    ns[VIDEO_STAGE_DECODE] = it->decode_ns;
    infd_error err;
    infd_error_clear(&err);
    uint64_t frame_no;
    pthread_mutex_lock(&s->lock);
    frame_no = s->frames;
    pthread_mutex_unlock(&s->lock);

    if (f->width <= 0 || f->height <= 0 || f->width > 8192 || f->height > 8192)
        return;
    bool on_gpu = f->format == AV_PIX_FMT_CUDA;
    enum AVPixelFormat enc_fmt = on_gpu ? AV_PIX_FMT_NV12 : AV_PIX_FMT_YUV420P;
    int have_w = on_gpu ? s->gpu_w : s->work->width, have_h = on_gpu ? s->gpu_h : s->work->height;
    if (f->width != have_w || f->height != have_h || !s->enc || s->enc->pix_fmt != enc_fmt) {
        double fps = video_ingest_fps(s->in);
        s->frame_dur = (int64_t)lround(90000.0 / fps);
        infd_status st = on_gpu ? gpu_resize(s, f->width, f->height, &err)
                                : resize(s, f->width, f->height, &err);
        if (st == INFD_STATUS_OK)
            st = open_encoder(s, f->width, f->height, fps, enc_fmt, &err);
        if (st != INFD_STATUS_OK) {
            infd_log(INFD_LOG_LEVEL_ERROR, "video: stream %s: frame %" PRIu64 " (%dx%d): %s",
                     s->name, frame_no, f->width, f->height, err.msg);
            close_encoder(s);
            av_frame_unref(s->work);
            s->gpu_w = s->gpu_h = 0;
            return;
        }
        infd_log(INFD_LOG_LEVEL_INFO,
                 "video: stream %s: %dx%d at %.2f fps, decoded on the %s, %s%s%s, %d kbit/s, "
                 "detector input %dx%d (letterbox %dx%d)",
                 s->name, f->width, f->height, fps, on_gpu ? "GPU (NVDEC)" : "CPU", sh->encoder,
                 strcmp(sh->encoder, "libx264") == 0 ? " preset " : "",
                 strcmp(sh->encoder, "libx264") == 0 ? sh->x264_preset : "", sh->bitrate_kbps,
                 sh->input_size, sh->input_size, s->lb.w, s->lb.h);
        pthread_mutex_lock(&s->lock);
        s->width = f->width;
        s->height = f->height;
        s->fps = fps;
        pthread_mutex_unlock(&s->lock);
    }

    int n = 0;
    AVFrame *out = detect_and_draw(s, f, frame_no, ns, &n);
    if (!out)
        return;

    int64_t pts = output_pts(s, f, video_ingest_pts_rate(s->in));
    out->pts = pts;
    pthread_mutex_lock(&s->lock);
    bool key = s->force_key;
    s->force_key = false;
    /* The periodic key frame, but not on a frame the sender made a key
     * frame: decoding that one is the slowest of all (an IDR, about 6 ms
     * at 640x640 on 2 cores), and encoding a key frame on it too made the
     * slowest 1% of frames (bench/RESULTS.md). One frame later instead. */
    bool input_key = f->key_frame || f->pict_type == AV_PICTURE_TYPE_I;
    if (s->since_key + 1 >= s->gop && !input_key)
        key = true;
    pthread_mutex_unlock(&s->lock);
    out->pict_type = key ? AV_PICTURE_TYPE_I : AV_PICTURE_TYPE_NONE;
    s->send_ns = 0;
    uint64_t t_out = 0, encode_ns = 0;
    uint64_t t4 = infd_clock_ns();
    int rc = avcodec_send_frame(s->enc, out);
    encode_ns += infd_clock_ns() - t4;
    if (rc < 0) {
        char text[AV_ERROR_MAX_STRING_SIZE];
        av_strerror(rc, text, sizeof(text));
        infd_log(INFD_LOG_LEVEL_WARN, "video: stream %s: frame %" PRIu64 ": %s: %s", s->name,
                 frame_no, sh->encoder, text);
    }
    drain_encoder(s, &t_out, &encode_ns);
    ns[VIDEO_STAGE_ENCODE] = encode_ns;
    ns[VIDEO_STAGE_SEND] = s->send_ns;
    /* Encoder output: when the encoder gave the frame's packet (the send
     * that follows is not processing). */
    ns[VIDEO_STAGE_PROCESS] = (t_out ? t_out : infd_clock_ns()) - it->decode_in;

    pthread_mutex_lock(&s->lock);
    s->frames++;
    pthread_mutex_unlock(&s->lock);
    atomic_fetch_add(&sh->frames, 1);
    atomic_fetch_add(&sh->faces, (uint64_t)n);
    if (sh->detections || atomic_load(&sh->subscribers) > 0)
        report_json(s, frame_no, pts, input_key, n, ns);
    record(s, ns);
}

/* ------------------------------------------------------------------------- */
/* The stream's thread                                                       */
/* ------------------------------------------------------------------------- */

/* A new publisher takes the stream over at once, unless the current one
 * has already left and what it sent is still being read: that ends within
 * the SRT latency, and the new one waits for it. */
static bool should_stop(void *user)
{
    video_stream *s = user;
    if (atomic_load(&s->sh->stopping))
        return true;
    pthread_mutex_lock(&s->lock);
    bool takeover = s->next_pub != SRT_INVALID_SOCK;
    pthread_mutex_unlock(&s->lock);
    return takeover && !video_ingest_publisher_gone(s->in);
}

static void run_publisher(video_stream *s, int sock)
{
    infd_error err;
    infd_error_clear(&err);
    atomic_fetch_add(&s->sh->publishers_total, 1);
    uint64_t errors0 = video_ingest_errors(s->in);
    if (video_ingest_open(s->in, sock, should_stop, s, &err) != INFD_STATUS_OK) {
        infd_log(err.code == INFD_STATUS_UNAVAILABLE ? INFD_LOG_LEVEL_INFO : INFD_LOG_LEVEL_WARN,
                 "video: %s (publisher disconnected)", err.msg);
        return;
    }
    infd_log(INFD_LOG_LEVEL_INFO, "video: stream %s: publishing", s->name);
    s->session_first = true;
    uint64_t frames0 = s->frames;
    video_ingest_timing it;
    while (video_ingest_read(s->in, s->decoded, &it) == 1)
        process(s, &it);
    av_frame_unref(s->decoded);
    uint64_t errors = video_ingest_errors(s->in) - errors0;
    atomic_fetch_add(&s->sh->decode_errors, errors);
    infd_log(INFD_LOG_LEVEL_INFO,
             "video: stream %s: publisher ended after %" PRIu64 " frames (%" PRIu64
             " demux/decode errors skipped)",
             s->name, s->frames - frames0, errors);
    video_ingest_close(s->in);
}

static void close_publisher(video_stream *s, int sock)
{
    srt_close(sock);
    if (s->sh->on_publisher_closed)
        s->sh->on_publisher_closed(s->sh->user);
}

static void *stream_main(void *arg)
{
    video_stream *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (s->next_pub == SRT_INVALID_SOCK && !atomic_load(&s->sh->stopping))
            pthread_cond_wait(&s->wake, &s->lock);
        int sock = s->next_pub;
        s->next_pub = SRT_INVALID_SOCK;
        s->pub = sock;
        pthread_mutex_unlock(&s->lock);
        if (atomic_load(&s->sh->stopping)) {
            if (sock != SRT_INVALID_SOCK)
                close_publisher(s, sock);
            break;
        }
        run_publisher(s, sock);
        pthread_mutex_lock(&s->lock);
        s->pub = SRT_INVALID_SOCK;
        pthread_mutex_unlock(&s->lock);
        close_publisher(s, sock);
    }
    /* Stopping: what the encoder holds goes out, then the TS trailer. */
    if (s->enc) {
        uint64_t encode_ns = 0;
        avcodec_send_frame(s->enc, NULL);
        drain_encoder(s, NULL, &encode_ns);
    }
    if (s->mux_started) {
        av_write_trailer(s->mux);
        avio_flush(s->mux->pb);
    }
    return NULL;
}

infd_status video_stream_create(video_shared *sh, const char *name, video_stream **out,
                                infd_error *err)
{
    *out = NULL;
    video_stream *s = infd_calloc(1, sizeof(*s));
    if (!s)
        goto oom;
    s->sh = sh;
    snprintf(s->name, sizeof(s->name), "%s", name);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    s->next_pub = s->pub = SRT_INVALID_SOCK;
    size_t S = (size_t)sh->input_size;
    s->input = infd_calloc(S * S * 3, sizeof(float));
    s->scratch = infd_calloc(1, video_detect_scratch_bytes());
    s->decoded = av_frame_alloc();
    s->work = av_frame_alloc();
    s->enc_pkt = av_packet_alloc();
    s->window = infd_histogram_create();
    if (!s->input || !s->scratch || !s->decoded || !s->work || !s->enc_pkt || !s->window)
        goto oom;
    if (sh->cuda) {
        /* NVDEC and the CUDA stages together, or neither. */
        infd_error gerr;
        infd_error_clear(&gerr);
        void *hw = NULL;
        s->rects = infd_calloc(VIDEO_DRAW_MAX_RECTS, sizeof(video_rect));
        s->host_frame = av_frame_alloc();
        if (!s->rects || !s->host_frame)
            goto oom;
        if (video_gpu_device(&hw, &gerr) != INFD_STATUS_OK ||
            video_gpu_create(hw, &s->gpu, &gerr) != INFD_STATUS_OK)
            infd_log(INFD_LOG_LEVEL_WARN, "video: stream %s: %s: frames on the CPU", name,
                     gerr.msg);
        if (s->gpu && video_ingest_create(name, hw, &s->in, err) != INFD_STATUS_OK) {
            av_buffer_unref((AVBufferRef **)&hw);
            goto fail;
        }
        av_buffer_unref((AVBufferRef **)&hw);
    }
    if (!s->in && video_ingest_create(name, NULL, &s->in, err) != INFD_STATUS_OK)
        goto fail;
    s->window_start_ns = infd_clock_ns();
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        infd_error_set(err, INFD_STATUS_INTERNAL, "stream %s: cannot start its thread", name);
        goto fail;
    }
    s->started = true;
    *out = s;
    return INFD_STATUS_OK;
oom:
    infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "stream %s: out of memory", name);
fail:
    video_stream_destroy(s);
    return err ? err->code : INFD_STATUS_OUT_OF_MEMORY;
}

void video_stream_destroy(video_stream *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->lock);
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
    }
    if (s->next_pub != SRT_INVALID_SOCK)
        close_publisher(s, s->next_pub);
    for (int i = 0; i < s->n_viewers; i++)
        srt_close(s->viewers[i]);
    video_ingest_destroy(s->in);
    close_encoder(s);
    video_gpu_destroy(s->gpu);
    infd_free(s->rects);
    av_frame_free(&s->host_frame);
    if (s->mux) {
        if (s->mux->pb) {
            av_freep(&s->mux->pb->buffer);
            avio_context_free(&s->mux->pb);
        }
        avformat_free_context(s->mux);
    }
    av_packet_free(&s->enc_pkt);
    av_frame_free(&s->decoded);
    av_frame_free(&s->work);
    sws_freeContext(s->to_rgb);
    sws_freeContext(s->to_yuv);
    infd_free(s->rgb);
    infd_free(s->input);
    infd_free(s->scratch);
    infd_histogram_destroy(s->window);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    infd_free(s);
}

const char *video_stream_name(const video_stream *s)
{
    return s->name;
}

void video_stream_publish(video_stream *s, int sock)
{
    pthread_mutex_lock(&s->lock);
    int old = s->next_pub;
    s->next_pub = sock;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->lock);
    if (old != SRT_INVALID_SOCK)
        close_publisher(s, old);
}

infd_status video_stream_add_viewer(video_stream *s, int sock, infd_error *err)
{
    bool no = false;
    srt_setsockflag(sock, SRTO_SNDSYN, &no, sizeof(no));
    pthread_mutex_lock(&s->lock);
    bool full = s->n_viewers == VIDEO_MAX_VIEWERS;
    if (!full) {
        s->viewers[s->n_viewers++] = sock;
        s->force_key = true;
    }
    pthread_mutex_unlock(&s->lock);
    if (full)
        return infd_error_set(err, INFD_STATUS_RESOURCE_EXHAUSTED,
                              "stream %s has %d viewers already", s->name, VIDEO_MAX_VIEWERS);
    atomic_fetch_add(&s->sh->viewers_total, 1);
    return INFD_STATUS_OK;
}

bool video_stream_remove_viewer(video_stream *s, int sock)
{
    bool found = false;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < s->n_viewers; i++) {
        if (s->viewers[i] == sock) {
            s->viewers[i] = s->viewers[--s->n_viewers];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return found;
}

void video_stream_get_info(video_stream *s, video_stream_info *out)
{
    pthread_mutex_lock(&s->lock);
    out->publishing = s->pub != SRT_INVALID_SOCK;
    out->viewers = s->n_viewers;
    out->frames = s->frames;
    out->width = s->width;
    out->height = s->height;
    out->fps = s->fps;
    pthread_mutex_unlock(&s->lock);
}
