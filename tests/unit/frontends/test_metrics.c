/*
 * test_metrics.c - the Prometheus text writer of the metrics frontend
 * (metrics_text.c, included: the frontends library is not linked into unit
 * tests, and the writer needs nothing of the server or of libevent).
 * The HTTP side is covered end to end by tests/e2e/test_metrics.py.
 */
#include "frontends/metrics/metrics_text.c"

#include <time.h>

#include "core/alloc.h"
#include "test.h"

static const double test_bounds[] = { 100, 1000, 1e6 };

/* Occurrences of `needle` in `hay`. */
static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

static void sample_stats(infd_metrics_model_sample *s, const char *name, int64_t version)
{
    memset(s, 0, sizeof(*s));
    s->name = name;
    s->version = version;
    s->stats.success_count = 7;
    s->stats.failure_count = 2;
    s->stats.inference_count = 12;
    s->stats.execution_count = 3;
    s->stats.success_ns = 5500000; /* 5500 us */
    s->stats.failure_ns = 1250;
    s->stats.queue_ns = 2999;
    s->stats.compute_infer_ns = 4000000;
    s->stats.queue_depth = 4;
    s->stats.pending_count = 5;
    s->stats.latency_buckets[0] = 1;
    s->stats.latency_buckets[1] = 3;
    s->stats.latency_buckets[2] = 4;
    s->stats.latency_buckets[INFD_LATENCY_BUCKETS] = 1;
    s->stats.batch_exec_count[1] = 1;
    s->stats.batch_exec_count[4] = 2;
    s->stats.batch_compute_ns[4] = 3000000;
    s->stats.batch_exec_count[INFD_STATS_MAX_BATCH] = 1;
}

static void test_label_escaping(void)
{
    infd_strbuf b = { 0 };
    infd_metrics_label_value(&b, "a\\b\"c\nd");
    ASSERT_TRUE(!b.oom);
    ASSERT_STR_EQ(b.data, "a\\\\b\\\"c\\nd");
    infd_strbuf_fini(&b);
    ASSERT_TRUE(b.data == NULL && b.len == 0);
}

static void test_model_families(void)
{
    infd_metrics_model_sample s[2];
    sample_stats(&s[0], "add_sub", 1);
    sample_stats(&s[1], "we\"ird", 3);
    s[1].stats.success_count = 100;
    infd_strbuf b = { 0 };
    infd_metrics_write_models(&b, s, 2, test_bounds, 3);
    ASSERT_TRUE(!b.oom);
    const char *t = b.data;
    /* One HELP and TYPE per family, however many models. */
    ASSERT_EQ_INT(count_of(t, "# TYPE infd_inference_request_success counter\n"), 1);
    ASSERT_EQ_INT(count_of(t, "# HELP infd_inference_request_success "), 1);
    ASSERT_EQ_INT(count_of(t, "# TYPE infd_inference_queue_depth gauge\n"), 1);
    ASSERT_EQ_INT(count_of(t, "# TYPE infd_inference_request_latency_us histogram\n"), 1);
    ASSERT_EQ_INT(count_of(t, "# TYPE "), count_of(t, "# HELP "));
    ASSERT_STR_HAS(t, "infd_inference_request_success{model=\"add_sub\",version=\"1\"} 7\n");
    ASSERT_STR_HAS(t, "infd_inference_request_success{model=\"we\\\"ird\",version=\"3\"} 100\n");
    ASSERT_STR_HAS(t, "infd_inference_request_failure{model=\"add_sub\",version=\"1\"} 2\n");
    ASSERT_STR_HAS(t, "infd_inference_count{model=\"add_sub\",version=\"1\"} 12\n");
    ASSERT_STR_HAS(t, "infd_inference_exec_count{model=\"add_sub\",version=\"1\"} 3\n");
    /* Nanoseconds become whole microseconds. */
    ASSERT_STR_HAS(t, "infd_inference_request_duration_us{model=\"add_sub\",version=\"1\"} 5500\n");
    ASSERT_STR_HAS(t, "infd_inference_queue_duration_us{model=\"add_sub\",version=\"1\"} 2\n");
    ASSERT_STR_HAS(t, "infd_inference_compute_infer_duration_us{model=\"add_sub\",version=\"1\"} "
                      "4000\n");
    ASSERT_STR_HAS(t,
                   "infd_inference_compute_input_duration_us{model=\"add_sub\",version=\"1\"} 0\n");
    ASSERT_STR_HAS(t, "infd_inference_queue_depth{model=\"add_sub\",version=\"1\"} 4\n");
    ASSERT_STR_HAS(t, "infd_inference_pending_request_count{model=\"add_sub\",version=\"1\"} 5\n");
    infd_strbuf_fini(&b);
}

static void test_latency_histogram(void)
{
    infd_metrics_model_sample s;
    sample_stats(&s, "m", 2);
    infd_strbuf b = { 0 };
    infd_metrics_write_models(&b, &s, 1, test_bounds, 3);
    ASSERT_TRUE(!b.oom);
    const char *t = b.data;
    /* Cumulative buckets, +Inf last and equal to _count; _sum in us. */
    ASSERT_STR_HAS(t,
                   "infd_inference_request_latency_us_bucket{model=\"m\",version=\"2\",le=\"100\"}"
                   " 1\n"
                   "infd_inference_request_latency_us_bucket{model=\"m\",version=\"2\",le=\"1000\"}"
                   " 4\n"
                   "infd_inference_request_latency_us_bucket{model=\"m\",version=\"2\","
                   "le=\"1000000\"} 8\n"
                   "infd_inference_request_latency_us_bucket{model=\"m\",version=\"2\","
                   "le=\"+Inf\"} 9\n"
                   "infd_inference_request_latency_us_sum{model=\"m\",version=\"2\"} 5500.000\n"
                   "infd_inference_request_latency_us_count{model=\"m\",version=\"2\"} 9\n");
    infd_strbuf_fini(&b);
}

static void test_batch_sizes(void)
{
    infd_metrics_model_sample s;
    sample_stats(&s, "m", 1);
    infd_strbuf b = { 0 };
    infd_metrics_write_models(&b, &s, 1, test_bounds, 3);
    ASSERT_TRUE(!b.oom);
    const char *t = b.data;
    ASSERT_STR_HAS(
        t, "infd_inference_batch_exec_count{model=\"m\",version=\"1\",batch_size=\"1\"} 1\n");
    ASSERT_STR_HAS(
        t, "infd_inference_batch_exec_count{model=\"m\",version=\"1\",batch_size=\"4\"} 2\n");
    ASSERT_STR_HAS(
        t, "infd_inference_batch_exec_count{model=\"m\",version=\"1\",batch_size=\"256\"} 1\n");
    ASSERT_STR_HAS(t, "infd_inference_batch_compute_infer_duration_us{model=\"m\",version=\"1\","
                      "batch_size=\"4\"} 3000\n");
    /* Sizes that never ran are left out. */
    ASSERT_EQ_INT(count_of(t, "infd_inference_batch_exec_count{"), 3);
    ASSERT_EQ_INT(count_of(t, "batch_size=\"2\""), 0);
    infd_strbuf_fini(&b);
}

static void test_no_models_declares_families(void)
{
    infd_strbuf b = { 0 };
    infd_metrics_write_models(&b, NULL, 0, test_bounds, 3);
    ASSERT_TRUE(!b.oom);
    ASSERT_STR_HAS(b.data, "# TYPE infd_inference_request_success counter\n");
    ASSERT_EQ_INT(count_of(b.data, "{"), 0);
    infd_strbuf_fini(&b);
}

static void test_process(void)
{
    infd_metrics_process_sample p;
    infd_metrics_read_process(&p);
    ASSERT_TRUE(p.cpu_seconds >= 0);
    ASSERT_TRUE(p.resident_bytes > 0);
    ASSERT_TRUE(p.virtual_bytes >= p.resident_bytes);
    ASSERT_TRUE(p.open_fds >= 0);
    ASSERT_TRUE(p.max_fds >= p.open_fds);
    /* Started after the year 2020 and not in the future. */
    ASSERT_TRUE(p.start_time_seconds > 1577836800.0);
    ASSERT_LE_DBL(p.start_time_seconds, (double)time(NULL) + 1);

    infd_strbuf b = { 0 };
    infd_metrics_write_process(&b, &p);
    ASSERT_TRUE(!b.oom);
    ASSERT_STR_HAS(b.data, "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ");
    ASSERT_STR_HAS(b.data, "# TYPE process_resident_memory_bytes gauge\n");
    ASSERT_STR_HAS(b.data, "\nprocess_start_time_seconds ");
    ASSERT_STR_HAS(b.data, "\nprocess_open_fds ");
    infd_strbuf_fini(&b);

    /* A value that could not be read leaves its family out. */
    p.max_fds = -1;
    infd_metrics_write_process(&b, &p);
    ASSERT_EQ_INT(count_of(b.data, "process_max_fds"), 0);
    infd_strbuf_fini(&b);
}

static void test_out_of_memory(void)
{
    infd_metrics_model_sample s;
    sample_stats(&s, "m", 1);
    for (int64_t n = 1;; n++) {
        infd_strbuf b = { 0 };
        infd_alloc_fail_after(n);
        infd_metrics_write_models(&b, &s, 1, test_bounds, 3);
        int fired = infd_alloc_injected_fired();
        infd_alloc_fail_after(0);
        if (!fired) {
            ASSERT_TRUE(!b.oom);
            infd_strbuf_fini(&b);
            break;
        }
        /* A failure sticks: the buffer never holds a partial page that
         * claims success. */
        ASSERT_TRUE(b.oom);
        infd_strbuf_fini(&b);
        ASSERT_TRUE(n < 100);
    }
}

TEST_MAIN(test_label_escaping, test_model_families, test_latency_histogram, test_batch_sizes,
          test_no_models_declares_families, test_process, test_out_of_memory)
