/* Unit tests for the per-client connection count (frontends/common). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/alloc.h"
#include "frontends/common/conn_limit.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

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

/* A socket for each admission: one end of a socketpair (the other end
 * kept, so the client has not hung up). */
typedef struct pair {
    int fd, peer;
} pair;

static pair open_pair(void)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        perror("socketpair");
        abort();
    }
    return (pair){ sv[0], sv[1] };
}

static void close_pair(pair p)
{
    close(p.fd);
    close(p.peer);
}

/* enter() on a new socket, which must answer `want`; its ticket in *t. */
static void enter(infd_conn_limit *l, pair *p, const struct sockaddr *peer, infd_conn_verdict want,
                  uint64_t *t)
{
    *p = open_pair();
    *t = 99;
    ASSERT_EQ_INT(infd_conn_limit_enter(l, p->fd, peer, t), want);
    ASSERT_TRUE((*t != 0) == (want == INFD_CONN_ADMITTED));
}

static void test_per_client_and_total(void)
{
    infd_conn_limit *l = infd_conn_limit_create(5, 2);
    ASSERT_TRUE(l != NULL);
    struct sockaddr_storage a1 = v4("10.0.0.1", 1000), a2 = v4("10.0.0.1", 2000);
    struct sockaddr_storage mapped = v6("::ffff:10.0.0.1"), b = v4("10.0.0.2", 1);
    struct sockaddr_storage c = v6("2001:db8::1");
    pair p[16];
    uint64_t t[16], t_;
    enter(l, &p[0], SA(a1), INFD_CONN_ADMITTED, &t[0]);
    enter(l, &p[1], SA(a2), INFD_CONN_ADMITTED, &t[1]);
    /* The port does not matter, and IPv4-mapped IPv6 is the same client. */
    enter(l, &p[2], SA(a1), INFD_CONN_OVER_PER_CLIENT, &t_);
    enter(l, &p[3], SA(mapped), INFD_CONN_OVER_PER_CLIENT, &t_);
    enter(l, &p[4], SA(b), INFD_CONN_ADMITTED, &t[4]);
    enter(l, &p[5], SA(c), INFD_CONN_ADMITTED, &t[5]);
    enter(l, &p[6], NULL, INFD_CONN_ADMITTED, &t[6]); /* total only */
    ASSERT_EQ_INT(infd_conn_limit_open(l), 5);
    enter(l, &p[7], SA(c), INFD_CONN_OVER_TOTAL, &t_);
    infd_conn_limit_leave(l, p[1].fd, t[1]);
    infd_conn_limit_leave(l, p[1].fd, t[1]); /* twice: a no-op */
    enter(l, &p[8], SA(mapped), INFD_CONN_ADMITTED, &t[8]);
    infd_conn_limit_leave(l, p[6].fd, t[6]);
    infd_conn_limit_leave(l, p[5].fd, t[5]);
    enter(l, &p[9], SA(c), INFD_CONN_ADMITTED, &t[9]);
    enter(l, &p[10], SA(c), INFD_CONN_ADMITTED, &t[10]);
    ASSERT_EQ_INT(infd_conn_limit_open(l), 5);
    enter(l, &p[11], SA(b), INFD_CONN_OVER_TOTAL, &t_);
    infd_conn_limit_leave(l, p[4].fd, t[4]);
    enter(l, &p[12], SA(c), INFD_CONN_OVER_PER_CLIENT, &t_);
    infd_conn_limit_leave(l, p[0].fd, 0); /* ticket 0: nothing */
    ASSERT_EQ_INT(infd_conn_limit_open(l), 4);
    for (int i = 0; i <= 12; i++)
        close_pair(p[i]);
    infd_conn_limit_destroy(l);
}

/* Connections whose close the frontend has not reported come back: the
 * fd number given again, the socket closed, or the client hung up. */
static void test_closed_ones_come_back(void)
{
    infd_conn_limit *l = infd_conn_limit_create(0, 2);
    ASSERT_TRUE(l != NULL);
    struct sockaddr_storage a = v4("192.0.2.7", 1), b = v4("192.0.2.8", 1);
    pair p[6], q[4];
    uint64_t t1, t_;
    /* b at its limit with both open: its scan releases nothing. */
    enter(l, &q[0], SA(b), INFD_CONN_ADMITTED, &t_);
    enter(l, &q[1], SA(b), INFD_CONN_ADMITTED, &t_);
    enter(l, &q[2], SA(b), INFD_CONN_OVER_PER_CLIENT, &t_);
    /* a's client hangs up on p[0] (the server has not closed its end yet):
     * a's own scan finds it, whatever b's scans did just before. */
    enter(l, &p[0], SA(a), INFD_CONN_ADMITTED, &t_);
    enter(l, &p[1], SA(a), INFD_CONN_ADMITTED, &t1);
    close(p[0].peer);
    enter(l, &p[2], SA(a), INFD_CONN_ADMITTED, &t_);
    ASSERT_EQ_INT(infd_conn_limit_open(l), 4);
    /* a at its limit with both open: that scan releases nothing, and a hang-up
     * right after waits for the next scan, 100 ms later. */
    enter(l, &q[3], SA(a), INFD_CONN_OVER_PER_CLIENT, &t_);
    close(p[2].peer);
    enter(l, &p[3], SA(a), INFD_CONN_OVER_PER_CLIENT, &t_);
    usleep(120 * 1000);
    enter(l, &p[4], SA(a), INFD_CONN_ADMITTED, &t_);
    /* The same fd number given again: p[1]'s place is released at once,
     * without a scan. */
    close_pair(p[1]);
    enter(l, &p[5], SA(a), INFD_CONN_ADMITTED, &t_);
    ASSERT_EQ_INT(p[5].fd, p[1].fd);       /* the lowest free number, as POSIX gives */
    infd_conn_limit_leave(l, p[1].fd, t1); /* p[1]'s late report: a no-op */
    ASSERT_EQ_INT(infd_conn_limit_open(l), 4);
    close(p[0].fd);
    close(p[2].fd);
    for (int i = 3; i < 6; i++)
        close_pair(p[i]);
    for (int i = 0; i < 4; i++)
        close_pair(q[i]);
    infd_conn_limit_destroy(l);
}

/* Many addresses: the buckets grow (over 512 nodes), every count stays
 * right, and the table empties when they leave. Each connection is a dup
 * of one socket: its own fd number, all open. */
#define N_CLIENTS 700

static void test_many_clients(void)
{
    infd_conn_limit *l = infd_conn_limit_create(0, 3);
    ASSERT_TRUE(l != NULL);
    pair base = open_pair();
    static int fds[N_CLIENTS + 2];
    static uint64_t tickets[N_CLIENTS + 2];
    char ip[32];
    for (int i = 0; i < N_CLIENTS + 2; i++) {
        int k = i < N_CLIENTS ? i : 19; /* the last two: a third and fourth for one */
        snprintf(ip, sizeof(ip), "10.%d.%d.%d", k >> 16, (k >> 8) & 255, k & 255);
        struct sockaddr_storage a = v4(ip, i);
        fds[i] = dup(base.fd);
        ASSERT_TRUE(fds[i] >= 0);
        ASSERT_EQ_INT(infd_conn_limit_enter(l, fds[i], SA(a), &tickets[i]), INFD_CONN_ADMITTED);
    }
    ASSERT_EQ_INT(infd_conn_limit_open(l), N_CLIENTS + 2);
    struct sockaddr_storage a = v4("10.0.0.19", 9);
    uint64_t t;
    ASSERT_EQ_INT(infd_conn_limit_enter(l, base.peer, SA(a), &t), INFD_CONN_OVER_PER_CLIENT);
    for (int i = 0; i < N_CLIENTS + 2; i++) {
        infd_conn_limit_leave(l, fds[i], tickets[i]);
        close(fds[i]);
    }
    ASSERT_EQ_INT(infd_conn_limit_open(l), 0);
    infd_alloc_stats s0 = infd_alloc_get_stats();
    infd_conn_limit_destroy(l);
    infd_alloc_stats s1 = infd_alloc_get_stats();
    ASSERT_EQ_U64(s1.n_frees - s0.n_frees, 3); /* buckets, records, the table: no node left */
    close_pair(base);
}

static void test_out_of_memory(void)
{
    infd_conn_limit *l = infd_conn_limit_create(0, 0);
    ASSERT_TRUE(l != NULL);
    struct sockaddr_storage a = v4("192.0.2.1", 1);
    pair p = open_pair();
    uint64_t t;
    for (int n = 1; n <= 2; n++) { /* the records, then the address's node */
        infd_alloc_fail_after(n);
        ASSERT_EQ_INT(infd_conn_limit_enter(l, p.fd, SA(a), &t), INFD_CONN_NO_MEMORY);
        ASSERT_EQ_U64(t, 0);
        infd_alloc_fail_after(0);
        ASSERT_EQ_INT(infd_conn_limit_open(l), 0);
    }
    ASSERT_EQ_INT(infd_conn_limit_enter(l, p.fd, SA(a), &t), INFD_CONN_ADMITTED);
    ASSERT_EQ_INT(infd_conn_limit_open(l), 1);
    close_pair(p);
    infd_conn_limit_destroy(l);
}

TEST_MAIN(test_per_client_and_total, test_closed_ones_come_back, test_many_clients,
          test_out_of_memory)
