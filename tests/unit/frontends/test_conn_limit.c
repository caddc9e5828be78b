/* Unit tests for the per-client connection count (frontends/common). */
#include <arpa/inet.h>
#include <netinet/in.h>

#include "core/alloc.h"
#include "frontends/common/conn_limit.h"
#include "test.h"

static struct sockaddr_storage v4(const char *ip, int port)
{
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &in->sin_addr);
    return ss;
}

static struct sockaddr_storage v6(const char *ip)
{
    struct sockaddr_storage ss = { 0 };
    struct sockaddr_in6 *in = (struct sockaddr_in6 *)&ss;
    in->sin6_family = AF_INET6;
    inet_pton(AF_INET6, ip, &in->sin6_addr);
    return ss;
}

#define SA(x) ((const struct sockaddr *)&(x))

static void test_per_client_and_total(void)
{
    infd_conn_limit *l = infd_conn_limit_create(5, 2);
    ASSERT_TRUE(l != NULL);
    struct sockaddr_storage a1 = v4("10.0.0.1", 1000), a2 = v4("10.0.0.1", 2000);
    struct sockaddr_storage mapped = v6("::ffff:10.0.0.1"), b = v4("10.0.0.2", 1);
    struct sockaddr_storage c = v6("2001:db8::1");
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(a1)), INFD_CONN_ADMITTED);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(a2)), INFD_CONN_ADMITTED);
    /* The port does not matter, and IPv4-mapped IPv6 is the same client. */
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(a1)), INFD_CONN_OVER_PER_CLIENT);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(mapped)), INFD_CONN_OVER_PER_CLIENT);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(b)), INFD_CONN_ADMITTED);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(c)), INFD_CONN_ADMITTED);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, NULL), INFD_CONN_ADMITTED); /* total only */
    ASSERT_EQ_INT(infd_conn_limit_open(l), 5);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(c)), INFD_CONN_OVER_TOTAL);
    infd_conn_limit_leave(l, SA(a2));
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(mapped)), INFD_CONN_ADMITTED);
    infd_conn_limit_leave(l, NULL);
    infd_conn_limit_leave(l, SA(c));
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(c)), INFD_CONN_ADMITTED);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(c)), INFD_CONN_ADMITTED);
    ASSERT_EQ_INT(infd_conn_limit_open(l), 5);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(b)), INFD_CONN_OVER_TOTAL);
    infd_conn_limit_leave(l, SA(b));
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(c)), INFD_CONN_OVER_PER_CLIENT);
    infd_conn_limit_destroy(l);
}

/* Many addresses: the buckets grow, every count stays right, and the
 * table empties when they leave. */
static void test_many_clients(void)
{
    infd_conn_limit *l = infd_conn_limit_create(0, 3);
    ASSERT_TRUE(l != NULL);
    char ip[32];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 5000; i++) {
            snprintf(ip, sizeof(ip), "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
            struct sockaddr_storage a = v4(ip, i);
            ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(a)), INFD_CONN_ADMITTED);
        }
    }
    ASSERT_EQ_INT(infd_conn_limit_open(l), 15000);
    struct sockaddr_storage a = v4("10.0.19.135", 9);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(a)), INFD_CONN_OVER_PER_CLIENT);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 5000; i++) {
            snprintf(ip, sizeof(ip), "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
            struct sockaddr_storage b = v4(ip, 7);
            infd_conn_limit_leave(l, SA(b));
        }
    }
    ASSERT_EQ_INT(infd_conn_limit_open(l), 0);
    infd_alloc_stats s0 = infd_alloc_get_stats();
    infd_conn_limit_destroy(l);
    infd_alloc_stats s1 = infd_alloc_get_stats();
    ASSERT_EQ_U64(s1.n_frees - s0.n_frees, 2); /* buckets and the table: no node was left */
}

static void test_out_of_memory(void)
{
    infd_conn_limit *l = infd_conn_limit_create(0, 0);
    ASSERT_TRUE(l != NULL);
    struct sockaddr_storage a = v4("192.0.2.1", 1);
    infd_alloc_fail_after(1);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(a)), INFD_CONN_NO_MEMORY);
    infd_alloc_fail_after(0);
    ASSERT_EQ_INT(infd_conn_limit_open(l), 0);
    ASSERT_EQ_INT(infd_conn_limit_enter(l, SA(a)), INFD_CONN_ADMITTED);
    infd_conn_limit_destroy(l);
}

TEST_MAIN(test_per_client_and_total, test_many_clients, test_out_of_memory)
