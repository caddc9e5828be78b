/*
 * cmd_video.c - `infd video`: the live video app on a server of its own.
 *
 * The detector is served from a private repository made for this run (a
 * temporary folder removed at exit): the model's ONNX file linked in, and a
 * config that puts its instance on the CPU or the GPU (--device) with the
 * dynamic batcher, so frames of several streams batch together. The app
 * (src/apps/video) is then started on that server, with the Prometheus
 * metrics frontend carrying the app's families next to the model's. The
 * main thread waits for SIGINT or SIGTERM, then stops the app (streams are
 * finished and closed), the metrics and the server, and exits 0. With
 * --http-port the HTTP frontend serves the detector over KServe v2 and the
 * app's routes: the streams, and each stream's detections as Server-Sent
 * Events.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apps/video/video.h"
#include "cli/cli.h"
#include "core/log.h"
#include "frontends/http/http.h"
#include "frontends/metrics/metrics.h"
#include "infd/infd.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: infd video [--listen srt://[HOST]:PORT] [options]\n"
            "  --listen URL             SRT listener (default srt://:9000)\n"
            "  --model NAME|DIR         the face detector: a model of --model-repository\n"
            "                           (default blazeface) or a model folder (DIR/1/model.onnx)\n"
            "  --model-repository DIR   where NAME is looked up (default models)\n"
            "  --device cpu|cuda        cuda: the detector on the GPU, NVDEC decoding, letterbox\n"
            "                           and drawing in CUDA (default cpu)\n"
            "  --passphrase P           SRT AES passphrase, 10 to 79 characters\n"
            "  --latency-ms N           SRT latency (default 120)\n"
            "  --detections FILE|-      one JSON line per frame: faces, timings\n"
            "  --metrics-port N         Prometheus /metrics (default -1: off; 0: any free port)\n"
            "  --http-port N            KServe v2 HTTP for the detector, and the detections as\n"
            "                           Server-Sent Events (/v2/video/...; default -1: off)\n"
            "  --host ADDR              address of the metrics port (default 0.0.0.0)\n"
            "  --min-score F            face score threshold (default 0.5)\n"
            "  --x264-preset P          libx264 preset (default ultrafast)\n"
            "  --encoder-threads N      the encoder's threads (default 0: its own choice)\n"
            "  --bitrate-kbps N         output bit rate (default 4000)\n"
            "  --max-connections N      publishers and viewers at once (default 64)\n"
            "  --default-stream NAME    the stream of callers without a stream ID (default "
            "live)\n"
            "  --stats-every N          log stage times every N frames a stream (default 300)\n"
            "  --warmup N               detector runs before listening (default 20)\n"
            "  --threads N              engine threads of the detector (default: cores - 1)\n"
            "  --log-level LEVEL        error | warn | info | debug (default info)\n");
}

/* The detector's ONNX file: DIR/<highest version>/model.onnx. */
static int find_onnx(const char *dir, char *out, size_t n)
{
    for (int version = 64; version >= 1; version--) {
        snprintf(out, n, "%s/%d/model.onnx", dir, version);
        if (access(out, R_OK) == 0)
            return 0;
    }
    return -1;
}

/* The private repository: TMP/NAME/config.pbtxt and TMP/NAME/1/model.onnx
 * (a link to the real file). */
static int make_repository(const char *tmp, const char *name, const char *onnx, const char *kind)
{
    char path[PATH_MAX + 64], real[PATH_MAX];
    if (!realpath(onnx, real))
        return -1;
    snprintf(path, sizeof(path), "%s/%s", tmp, name);
    if (mkdir(path, 0700) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/%s/1", tmp, name);
    if (mkdir(path, 0700) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/%s/1/model.onnx", tmp, name);
    if (symlink(real, path) != 0)
        return -1;
    snprintf(path, sizeof(path), "%s/%s/config.pbtxt", tmp, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    /* No queue delay: one stream's frame runs at once; frames of several
     * streams that arrive together still batch. */
    fprintf(f,
            "name: \"%s\"\nbackend: \"onnxruntime\"\nmax_batch_size: 8\n"
            "dynamic_batching { max_queue_delay_microseconds: 0 }\n"
            "instance_group [ { count: 1 kind: %s } ]\n",
            name, kind);
    return fclose(f) == 0 ? 0 : -1;
}

static void remove_repository(const char *tmp, const char *name)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s/1/model.onnx", tmp, name);
    unlink(path);
    snprintf(path, sizeof(path), "%s/%s/1", tmp, name);
    rmdir(path);
    snprintf(path, sizeof(path), "%s/%s/config.pbtxt", tmp, name);
    unlink(path);
    snprintf(path, sizeof(path), "%s/%s", tmp, name);
    rmdir(path);
    rmdir(tmp);
}

static bool sink_send(void *sink, const char *line, size_t n)
{
    return infd_http_sink_send(sink, line, n);
}

static void sink_release(void *sink)
{
    infd_http_sink_release(sink);
}

void infd_cli_video_routes_init(infd_cli_video_routes *r, infd_video *video)
{
    pthread_rwlock_init(&r->lock, NULL);
    r->video = video;
}

void infd_cli_video_routes_detach(infd_cli_video_routes *r)
{
    pthread_rwlock_wrlock(&r->lock);
    r->video = NULL;
    pthread_rwlock_unlock(&r->lock);
}

static infd_status route(infd_video *v, const char *path, infd_http_sink *sink, char **json,
                         size_t *n, infd_error *err)
{
    static const char prefix[] = "streams/", suffix[] = "/detections";
    size_t len = strlen(path), pre = sizeof(prefix) - 1, suf = sizeof(suffix) - 1;
    if (!v)
        return infd_error_set(err, INFD_STATUS_UNAVAILABLE, "the video app is stopping");
    if (strcmp(path, "streams") == 0)
        return infd_video_streams_json(v, json, n, err);
    if (len > pre + suf && strncmp(path, prefix, pre) == 0 &&
        strcmp(path + len - suf, suffix) == 0) {
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)(len - pre - suf), path + pre);
        infd_video_subscriber sub = { sink_send, sink_release, sink };
        *json = NULL;
        return infd_video_subscribe(v, name, &sub, err);
    }
    return infd_error_set(err, INFD_STATUS_NOT_FOUND,
                          "no video route '%.200s': /v2/video/streams or "
                          "/v2/video/streams/{name}/detections",
                          path);
}

infd_status infd_cli_video_route(void *user, const char *path, infd_http_sink *sink, char **json,
                                 size_t *n, infd_error *err)
{
    infd_cli_video_routes *r = user;
    pthread_rwlock_rdlock(&r->lock);
    infd_status st = route(r->video, path, sink, json, n, err);
    pthread_rwlock_unlock(&r->lock);
    return st;
}

infd_status infd_cli_video_metrics(void *user, char **out, size_t *n, infd_error *err)
{
    return infd_video_metrics_render(user, out, n, err);
}

int infd_cli_video(int argc, char **argv)
{
    infd_video_options vo;
    infd_video_options_init(&vo);
    infd_metrics_options mo;
    infd_metrics_options_init(&mo);
    mo.port = -1;
    infd_http_options ho;
    infd_http_options_init(&ho);
    ho.port = -1;
    infd_server_options so;
    infd_server_options_init(&so);
    const char *model = "blazeface", *repository = "models", *device = "cpu";
    infd_error err;
    infd_error_clear(&err);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return INFD_EXIT_OK;
        }
        if (!v) {
            fprintf(stderr, "infd video: %s needs a value (or is unknown)\n", a);
            usage(stderr);
            return INFD_EXIT_USAGE;
        }
        i++;
        int bad = 0;
        if (strcmp(a, "--listen") == 0) {
            vo.listen = v;
        } else if (strcmp(a, "--model") == 0) {
            model = v;
        } else if (strcmp(a, "--model-repository") == 0) {
            repository = v;
        } else if (strcmp(a, "--device") == 0) {
            bad = strcmp(v, "cpu") != 0 && strcmp(v, "cuda") != 0;
            device = v;
        } else if (strcmp(a, "--passphrase") == 0) {
            vo.passphrase = v;
        } else if (strcmp(a, "--latency-ms") == 0) {
            bad = infd_cli_parse_long(v, 0, 10000, &n);
            vo.latency_ms = (int)n;
        } else if (strcmp(a, "--detections") == 0) {
            vo.detections = v;
        } else if (strcmp(a, "--metrics-port") == 0) {
            bad = infd_cli_parse_long(v, -1, 65535, &n);
            mo.port = (int)n;
        } else if (strcmp(a, "--http-port") == 0) {
            bad = infd_cli_parse_long(v, -1, 65535, &n);
            ho.port = (int)n;
        } else if (strcmp(a, "--host") == 0) {
            mo.host = v;
            ho.host = v;
        } else if (strcmp(a, "--min-score") == 0) {
            char *end;
            vo.min_score = strtof(v, &end);
            bad = *end || !(vo.min_score > 0 && vo.min_score < 1);
        } else if (strcmp(a, "--x264-preset") == 0) {
            vo.x264_preset = v;
        } else if (strcmp(a, "--encoder-threads") == 0) {
            bad = infd_cli_parse_long(v, 0, 64, &n);
            vo.encoder_threads = (int)n;
        } else if (strcmp(a, "--bitrate-kbps") == 0) {
            bad = infd_cli_parse_long(v, 16, 1000000, &n);
            vo.bitrate_kbps = (int)n;
        } else if (strcmp(a, "--max-connections") == 0) {
            bad = infd_cli_parse_long(v, 1, 1024, &n);
            vo.max_connections = (int)n;
        } else if (strcmp(a, "--default-stream") == 0) {
            vo.default_stream = v;
        } else if (strcmp(a, "--stats-every") == 0) {
            bad = infd_cli_parse_long(v, 0, 1L << 30, &n);
            vo.stats_every = (int)n;
        } else if (strcmp(a, "--warmup") == 0) {
            bad = infd_cli_parse_long(v, 0, 100000, &n);
            vo.warmup_runs = (int)n;
        } else if (strcmp(a, "--threads") == 0) {
            bad = infd_cli_parse_long(v, 1, 1024, &n);
            so.n_threads = (int)n;
        } else if (strcmp(a, "--log-level") == 0) {
            infd_log_level level;
            bad = infd_log_level_parse(v, &level, &err) != INFD_STATUS_OK;
            if (!bad)
                infd_log_set_level(level);
        } else {
            fprintf(stderr, "infd video: unknown option %s\n", a);
            usage(stderr);
            return INFD_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "infd video: bad value for %s: '%s'%s%s\n", a, v,
                    err.msg[0] ? ": " : "", err.msg);
            return INFD_EXIT_USAGE;
        }
    }

    /* The detector's folder: DIR as given, or NAME in the repository. */
    char dir[PATH_MAX], onnx[PATH_MAX + 32];
    struct stat st;
    if (stat(model, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(dir, sizeof(dir), "%s", model);
    else
        snprintf(dir, sizeof(dir), "%s/%s", repository, model);
    if (find_onnx(dir, onnx, sizeof(onnx)) != 0) {
        fprintf(stderr,
                "infd video: model %s: no %s/<version>/model.onnx (run `make serve` or "
                "scripts/setup.sh once to fetch BlazeFace)\n",
                model, dir);
        return INFD_EXIT_FAILURE;
    }
    const char *slash = strrchr(dir, '/');
    const char *name = slash && slash[1] ? slash + 1 : dir;
    vo.model = name;
    vo.device = device;

    sigset_t stop;
    infd_cli_block_stop_signals(&stop);

    int rc = INFD_EXIT_FAILURE;
    infd_server *server = NULL;
    infd_video *video = NULL;
    infd_metrics *metrics = NULL;
    infd_http *http = NULL;
    infd_cli_video_routes routes;
    infd_cli_video_routes_init(&routes, NULL);
    infd_http_extension ext = { "video", infd_cli_video_route, &routes };
    char tmp[] = "/tmp/infd-video-XXXXXX";
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "infd video: cannot make a temporary folder: %s\n", strerror(errno));
        return INFD_EXIT_FAILURE;
    }
    if (make_repository(tmp, name, onnx, strcmp(device, "cuda") == 0 ? "KIND_GPU" : "KIND_CPU") !=
        0) {
        fprintf(stderr, "infd video: cannot write the detector's repository in %s: %s\n", tmp,
                strerror(errno));
        goto out;
    }
    so.model_repository = tmp;
    so.exit_on_error = true;
    so.pinned_pool_bytes = 0;
    infd_log(INFD_LOG_LEVEL_INFO, "infd %s (git %s) video: detector %s on %s", infd_version(),
             infd_version_git(), onnx, device);
    if (infd_server_create(&so, &server, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd video: %s\n", err.msg);
        goto out;
    }
    if (infd_video_start(server, &vo, &video, &err) != INFD_STATUS_OK) {
        fprintf(stderr, "infd video: %s\n", err.msg);
        goto out;
    }
    if (mo.port >= 0) {
        mo.extra = infd_cli_video_metrics;
        mo.extra_user = video;
        if (infd_metrics_start(server, &mo, &metrics, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd video: %s\n", err.msg);
            goto out;
        }
        infd_log(INFD_LOG_LEVEL_INFO, "metrics listening on %s:%d", mo.host,
                 infd_metrics_port(metrics));
    }
    if (ho.port >= 0) {
        routes.video = video; /* before the frontend starts: no reader yet */
        ho.extensions = &ext;
        ho.n_extensions = 1;
        if (infd_http_start(server, &ho, &http, &err) != INFD_STATUS_OK) {
            fprintf(stderr, "infd video: %s\n", err.msg);
            goto out;
        }
        infd_log(INFD_LOG_LEVEL_INFO, "HTTP listening on %s:%d (/v2/video/streams)", ho.host,
                 infd_http_port(http));
    }
    infd_log(INFD_LOG_LEVEL_INFO, "video: ready on SRT port %d; SIGTERM or Ctrl-C stops",
             infd_video_port(video));
    int sig = 0;
    sigwait(&stop, &sig);
    infd_log(INFD_LOG_LEVEL_INFO, "%s: closing the streams", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    rc = INFD_EXIT_OK;
out:
    /* The app releases its event streams before the HTTP frontend stops;
     * its routes are detached first, so none runs on a stopped app. */
    infd_metrics_stop(metrics);
    infd_cli_video_routes_detach(&routes);
    infd_video_stop(video);
    infd_http_stop(http);
    infd_server_destroy(server);
    remove_repository(tmp, name);
    if (rc == INFD_EXIT_OK)
        infd_log(INFD_LOG_LEVEL_INFO, "stopped");
    return rc;
}
