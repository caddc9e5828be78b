/*
 * metrics_text.h - the Prometheus text exposition format (version 0.0.4)
 * written from snapshots of model and process statistics.
 *
 * The metrics frontend (metrics.c) takes the snapshots and serves the text;
 * this half knows nothing of the server or of HTTP, so the unit test drives
 * it with made-up statistics. Every family is written as one block: a
 * "# HELP" and a "# TYPE" line, then its samples for every model, as the
 * format requires. Label values are escaped (backslash, double quote, line
 * feed). The writers append to a core/strbuf buffer: check its `oom` once,
 * at the end.
 *
 * Not thread-safe per buffer; no global state.
 */
#ifndef INFD_FRONTENDS_METRICS_METRICS_TEXT_H
#define INFD_FRONTENDS_METRICS_METRICS_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"
#include "infd/infd.h"

/* Appends `s` as a label value: backslash, double quote and line feed become
 * \\, \" and \n. */
void infd_metrics_label_value(infd_strbuf *b, const char *s);

/* One model version's statistics at the time of the scrape. */
typedef struct infd_metrics_model_sample {
    const char *name; /* borrowed for the write */
    int64_t version;
    infd_model_stats stats;
} infd_metrics_model_sample;

/* Writes every per-model family for `n` samples (names below). `bounds_us`
 * are the n_bounds finite upper bounds of stats.latency_buckets[0..n_bounds)
 * in increasing order; latency_buckets[n_bounds] counts the rest (+Inf).
 * With n == 0 the families are still declared (HELP/TYPE), without samples.
 *
 * Families, labels {model="m",version="v"}:
 *   counters infd_inference_request_success, _request_failure, _count,
 *            _exec_count, _request_duration_us (successful requests, as
 *            Triton), _queue_duration_us, _compute_input_duration_us,
 *            _compute_infer_duration_us, _compute_output_duration_us
 *   gauges   infd_inference_pending_request_count, infd_inference_queue_depth
 *   histogram infd_inference_request_latency_us (_bucket{le}, _sum, _count)
 *            of successful requests (those the runtime's histogram holds)
 *   counters infd_inference_batch_exec_count and
 *            infd_inference_batch_compute_infer_duration_us with a third
 *            label batch_size="b", for each batch size that ran at least once
 */
void infd_metrics_write_models(infd_strbuf *b, const infd_metrics_model_sample *samples, int n,
                               const double *bounds_us, int n_bounds);

/* The process, read from /proc/self and the C library. A field that could
 * not be read is negative and its family is left out. */
typedef struct infd_metrics_process_sample {
    double cpu_seconds;        /* user + system CPU time */
    double resident_bytes;     /* RSS */
    double virtual_bytes;      /* address space size */
    double start_time_seconds; /* Unix time the process started */
    double open_fds;           /* open file descriptors */
    double max_fds;            /* RLIMIT_NOFILE soft limit */
} infd_metrics_process_sample;

/* Fills `out` for the calling process. Cost: a few small /proc reads and a
 * walk of /proc/self/fd. */
void infd_metrics_read_process(infd_metrics_process_sample *out);

/* Writes process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_start_time_seconds,
 * process_open_fds and process_max_fds (the names of the Prometheus client
 * libraries, so standard dashboards work). */
void infd_metrics_write_process(infd_strbuf *b, const infd_metrics_process_sample *p);

#endif /* INFD_FRONTENDS_METRICS_METRICS_TEXT_H */
