/*
 * metrics_text.c - Prometheus text format from statistics snapshots.
 *
 * The per-model counters are table-driven: each row names a family and the
 * infd_model_stats field it exposes, with a divisor that turns the runtime's
 * nanoseconds into the microseconds of Triton's metric names. Counters stay
 * integers, as Triton's are; only the histogram's _sum has a fraction.
 */
#include "frontends/metrics/metrics_text.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* Label values                                                              */
/* ------------------------------------------------------------------------- */

void infd_metrics_label_value(infd_strbuf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"') {
            infd_strbuf_putc(b, '\\');
            infd_strbuf_putc(b, *s);
        } else if (*s == '\n') {
            infd_strbuf_putc(b, '\\');
            infd_strbuf_putc(b, 'n');
        } else {
            infd_strbuf_putc(b, *s);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Families                                                                  */
/* ------------------------------------------------------------------------- */

/* HELP text is ours and needs no escaping (no backslash or line feed). */
static void family(infd_strbuf *b, const char *name, const char *type, const char *help)
{
    infd_strbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Writes `{model="m",version="v"` without the closing brace, so callers can
 * add labels. */
static void model_labels_open(infd_strbuf *b, const infd_metrics_model_sample *s)
{
    infd_strbuf_printf(b, "{model=\"");
    infd_metrics_label_value(b, s->name);
    infd_strbuf_printf(b, "\",version=\"%" PRId64 "\"", s->version);
}

typedef struct stat_family {
    const char *name;
    const char *type;
    const char *help;
    size_t offset;    /* of a uint64_t in infd_model_stats */
    uint64_t divisor; /* 1000: ns -> us */
} stat_family;

#define STAT_(field) offsetof(infd_model_stats, field)

static const stat_family stat_families[] = {
    { "infd_inference_request_success", "counter",
      "Number of successful inference requests, all batch sizes", STAT_(success_count), 1 },
    { "infd_inference_request_failure", "counter",
      "Number of failed inference requests (errors and rejections), all batch sizes",
      STAT_(failure_count), 1 },
    { "infd_inference_count", "counter",
      "Number of inferences performed (a request of batch size N counts N)", STAT_(inference_count),
      1 },
    { "infd_inference_exec_count", "counter",
      "Number of model executions performed (one per batch the scheduler ran)",
      STAT_(execution_count), 1 },
    { "infd_inference_request_duration_us", "counter",
      "Cumulative end-to-end duration of successful inference requests in microseconds",
      STAT_(success_ns), 1000 },
    { "infd_inference_queue_duration_us", "counter",
      "Cumulative time requests spent queued before execution in microseconds", STAT_(queue_ns),
      1000 },
    { "infd_inference_compute_input_duration_us", "counter",
      "Cumulative time gathering request inputs into batches in microseconds",
      STAT_(compute_input_ns), 1000 },
    { "infd_inference_compute_infer_duration_us", "counter",
      "Cumulative model execution time in microseconds", STAT_(compute_infer_ns), 1000 },
    { "infd_inference_compute_output_duration_us", "counter",
      "Cumulative time scattering batch outputs to requests in microseconds",
      STAT_(compute_output_ns), 1000 },
    { "infd_inference_pending_request_count", "gauge",
      "Number of requests submitted and not yet completed", STAT_(pending_count), 1 },
    { "infd_model_weight_bytes", "gauge",
      "Bytes of a model's weights in the form its kernels read, all devices (one copy)",
      STAT_(weight_bytes), 1 },
    { "infd_model_arena_bytes", "gauge",
      "Bytes of activation memory of a model's contexts, all devices", STAT_(arena_bytes), 1 },
    { "infd_inference_queue_depth", "gauge", "Number of requests waiting in the scheduler queue",
      STAT_(queue_depth), 1 },
};

static uint64_t stat_field(const infd_model_stats *st, size_t offset)
{
    uint64_t v;
    memcpy(&v, (const char *)st + offset, sizeof(v));
    return v;
}

static void write_latency(infd_strbuf *b, const infd_metrics_model_sample *samples, int n,
                          const double *bounds_us, int n_bounds)
{
    const char *name = "infd_inference_request_latency_us";
    family(b, name, "histogram",
           "Latency of successful inference requests from submit to completion in microseconds");
    if (n_bounds > INFD_LATENCY_BUCKETS)
        n_bounds = INFD_LATENCY_BUCKETS;
    for (int i = 0; i < n; i++) {
        const infd_metrics_model_sample *s = &samples[i];
        uint64_t cum = 0;
        for (int k = 0; k < n_bounds && isfinite(bounds_us[k]); k++) {
            cum += s->stats.latency_buckets[k];
            infd_strbuf_printf(b, "%s_bucket", name);
            model_labels_open(b, s);
            infd_strbuf_printf(b, ",le=\"%.15g\"} %" PRIu64 "\n", bounds_us[k], cum);
        }
        /* Whatever lies past the finite bounds is in the +Inf bucket, so
         * _count always equals it, as Prometheus expects. */
        uint64_t total = 0;
        for (int k = 0; k <= INFD_LATENCY_BUCKETS; k++)
            total += s->stats.latency_buckets[k];
        infd_strbuf_printf(b, "%s_bucket", name);
        model_labels_open(b, s);
        infd_strbuf_printf(b, ",le=\"+Inf\"} %" PRIu64 "\n", total);
        /* The runtime records successful requests in the histogram, so the
         * sum is theirs too. */
        uint64_t sum_ns = s->stats.success_ns;
        infd_strbuf_printf(b, "%s_sum", name);
        model_labels_open(b, s);
        infd_strbuf_printf(b, "} %" PRIu64 ".%03" PRIu64 "\n", sum_ns / 1000, sum_ns % 1000);
        infd_strbuf_printf(b, "%s_count", name);
        model_labels_open(b, s);
        infd_strbuf_printf(b, "} %" PRIu64 "\n", total);
    }
}

static void write_batches(infd_strbuf *b, const infd_metrics_model_sample *samples, int n)
{
    family(b, "infd_inference_batch_exec_count", "counter",
           "Number of model executions by batch size (rows in the batch)");
    for (int i = 0; i < n; i++) {
        for (int bs = 1; bs <= INFD_STATS_MAX_BATCH; bs++) {
            uint64_t count = samples[i].stats.batch_exec_count[bs];
            if (!count)
                continue;
            infd_strbuf_printf(b, "infd_inference_batch_exec_count");
            model_labels_open(b, &samples[i]);
            infd_strbuf_printf(b, ",batch_size=\"%d\"} %" PRIu64 "\n", bs, count);
        }
    }
    family(b, "infd_inference_batch_compute_infer_duration_us", "counter",
           "Cumulative model execution time by batch size in microseconds");
    for (int i = 0; i < n; i++) {
        for (int bs = 1; bs <= INFD_STATS_MAX_BATCH; bs++) {
            if (!samples[i].stats.batch_exec_count[bs])
                continue;
            infd_strbuf_printf(b, "infd_inference_batch_compute_infer_duration_us");
            model_labels_open(b, &samples[i]);
            infd_strbuf_printf(b, ",batch_size=\"%d\"} %" PRIu64 "\n", bs,
                               samples[i].stats.batch_compute_ns[bs] / 1000);
        }
    }
}

/* infd_model_stats.memory_usage, one sample per model and device. */
static void write_memory(infd_strbuf *b, const infd_metrics_model_sample *samples, int n)
{
    family(b, "infd_model_memory_bytes", "gauge",
           "Memory a model holds on a device (Triton's memory_usage): its weights, one copy "
           "shared by every plan, and its contexts' arenas");
    for (int i = 0; i < n; i++) {
        const infd_model_stats *st = &samples[i].stats;
        for (int k = 0; k < st->n_memory_usage; k++) {
            infd_strbuf_printf(b, "infd_model_memory_bytes");
            model_labels_open(b, &samples[i]);
            infd_strbuf_printf(b, ",type=\"%s\",id=\"%" PRId64 "\"} %" PRIu64 "\n",
                               st->memory_usage[k].type, st->memory_usage[k].id,
                               st->memory_usage[k].byte_size);
        }
    }
}

void infd_metrics_write_models(infd_strbuf *b, const infd_metrics_model_sample *samples, int n,
                               const double *bounds_us, int n_bounds)
{
    for (size_t f = 0; f < sizeof(stat_families) / sizeof(stat_families[0]); f++) {
        const stat_family *sf = &stat_families[f];
        family(b, sf->name, sf->type, sf->help);
        for (int i = 0; i < n; i++) {
            infd_strbuf_printf(b, "%s", sf->name);
            model_labels_open(b, &samples[i]);
            infd_strbuf_printf(b, "} %" PRIu64 "\n",
                               stat_field(&samples[i].stats, sf->offset) / sf->divisor);
        }
    }
    write_latency(b, samples, n, bounds_us, n_bounds);
    write_batches(b, samples, n);
    write_memory(b, samples, n);
}

/* ------------------------------------------------------------------------- */
/* Process                                                                   */
/* ------------------------------------------------------------------------- */

/* Reads a small /proc file into `buf` (NUL-terminated); false on error. */
static bool read_small_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

/* Boot time (Unix seconds) from /proc/stat's "btime" line; -1 on error. */
static double boot_time_seconds(void)
{
    char buf[8192];
    if (!read_small_file("/proc/stat", buf, sizeof(buf)))
        return -1;
    const char *p = strstr(buf, "\nbtime ");
    unsigned long long btime;
    if (!p || sscanf(p + 7, "%llu", &btime) != 1)
        return -1;
    return (double)btime;
}

/* Process start from /proc/self/stat field 22 (starttime, clock ticks after
 * boot). The command name (field 2) may hold spaces and parentheses, so the
 * fields are counted from its last ')'. */
static double start_time_seconds(void)
{
    char buf[1024];
    if (!read_small_file("/proc/self/stat", buf, sizeof(buf)))
        return -1;
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    /* After ')' come fields 3 (state) ... 22 (starttime): skip 19 fields. */
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return -1;
    }
    unsigned long long ticks;
    long hz = sysconf(_SC_CLK_TCK);
    double boot = boot_time_seconds();
    if (sscanf(p + 1, "%llu", &ticks) != 1 || hz <= 0 || boot < 0)
        return -1;
    return boot + (double)ticks / (double)hz;
}

static double count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    double n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.')
            n++;
    }
    closedir(d);
    return n - 1; /* the descriptor opendir itself held */
}

void infd_metrics_read_process(infd_metrics_process_sample *out)
{
    out->cpu_seconds = -1;
    out->resident_bytes = -1;
    out->virtual_bytes = -1;
    out->max_fds = -1;

    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0)
        out->cpu_seconds = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;

    char buf[256];
    unsigned long long size_pages, resident_pages;
    long page = sysconf(_SC_PAGESIZE);
    if (page > 0 && read_small_file("/proc/self/statm", buf, sizeof(buf)) &&
        sscanf(buf, "%llu %llu", &size_pages, &resident_pages) == 2) {
        out->virtual_bytes = (double)size_pages * (double)page;
        out->resident_bytes = (double)resident_pages * (double)page;
    }
    out->start_time_seconds = start_time_seconds();
    out->open_fds = count_open_fds();
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        out->max_fds = (double)rl.rlim_cur;
}

static void process_family(infd_strbuf *b, const char *name, const char *type, const char *help,
                           double value)
{
    if (value < 0)
        return;
    family(b, name, type, help);
    infd_strbuf_printf(b, "%s %.17g\n", name, value);
}

void infd_metrics_write_process(infd_strbuf *b, const infd_metrics_process_sample *p)
{
    process_family(b, "process_cpu_seconds_total", "counter",
                   "Total user and system CPU time spent in seconds", p->cpu_seconds);
    process_family(b, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes",
                   p->resident_bytes);
    process_family(b, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes",
                   p->virtual_bytes);
    process_family(b, "process_start_time_seconds", "gauge",
                   "Start time of the process since unix epoch in seconds", p->start_time_seconds);
    process_family(b, "process_open_fds", "gauge", "Number of open file descriptors", p->open_fds);
    process_family(b, "process_max_fds", "gauge", "Maximum number of open file descriptors",
                   p->max_fds);
}
