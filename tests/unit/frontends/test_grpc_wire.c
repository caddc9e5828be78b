/*
 * test_grpc_wire.c - a ModelInferRequest's raw_input_contents found across
 * the slices gRPC received it in (src/frontends/grpc/wire.c): every way of
 * cutting a message into two or three pieces gives the same raw contents
 * and the same rest, and malformed framing is rejected with its byte.
 *
 * The splitter lives in the frontends library; the test compiles its source
 * in (test.h allows that) so it links against libinfd alone.
 */
#include "frontends/grpc/wire.c"

#include "test.h"

/* Hand-made wire bytes: field 1 "m" (model_name), field 7 "ABCDEFGHIJ",
 * field 8 varint 300, field 7 "" (empty), field 9 fixed64, field 10
 * fixed32, field 7 "xyz", field 5 a nested message of 3 bytes. */
static const uint8_t MSG[] = {
    0x0a, 1,    'm',  0x3a, 10,   'A',  'B', 'C', 'D', 'E',  'F', 'G',  'H', 'I', 'J',
    0x40, 0xac, 0x02, 0x3a, 0,    0x49, 1,   2,   3,   4,    5,   6,    7,   8,   0x55,
    9,    9,    9,    9,    0x3a, 3,    'x', 'y', 'z', 0x2a, 3,   0x0a, 1,   'i',
};
/* MSG without its field-7 entries. */
static const uint8_t REST[] = {
    0x0a, 1, 'm',  0x40, 0xac, 0x02, 0x49, 1,    2, 3,    4, 5,   6,
    7,    8, 0x55, 9,    9,    9,    9,    0x2a, 3, 0x0a, 1, 'i',
};

/* The bytes of raw entry k joined, into buf; its size. */
static size_t joined(const grpc_wire_raw *r, uint8_t *buf)
{
    size_t n = 0;
    for (int p = 0; p < r->n_pieces; p++) {
        memcpy(buf + n, r->pieces[p].data, r->pieces[p].nbytes);
        n += r->pieces[p].nbytes;
    }
    return n;
}

/* Splits MSG cut at a and b (a <= b; empty pieces included) and checks. */
static bool split_at(size_t a, size_t b)
{
    infd_data_segment in[3] = { { MSG, a }, { MSG + a, b - a }, { MSG + b, sizeof(MSG) - b } };
    infd_arena ar;
    infd_arena_init(&ar, 0);
    grpc_wire_raw raw[4];
    const uint8_t *rest;
    size_t rest_n;
    int n_raw;
    infd_error err = { 0 };
    bool ok = grpc_wire_split(&ar, in, 3, &rest, &rest_n, raw, 4, &n_raw, &err) == INFD_STATUS_OK;
    uint8_t buf[64];
    ok = ok && n_raw == 3 && rest_n == sizeof(REST) && memcmp(rest, REST, rest_n) == 0;
    ok = ok && joined(&raw[0], buf) == 10 && memcmp(buf, "ABCDEFGHIJ", 10) == 0;
    ok = ok && raw[0].nbytes == 10 && raw[1].nbytes == 0 && raw[1].n_pieces == 0;
    ok = ok && joined(&raw[2], buf) == 3 && memcmp(buf, "xyz", 3) == 0;
    /* The pieces point into MSG itself: nothing was copied. */
    for (int k = 0; ok && k < 3; k++)
        for (int p = 0; p < raw[k].n_pieces; p++)
            ok = ok && (const uint8_t *)raw[k].pieces[p].data >= MSG &&
                 (const uint8_t *)raw[k].pieces[p].data < MSG + sizeof(MSG) &&
                 raw[k].pieces[p].nbytes > 0;
    infd_arena_fini(&ar);
    if (!ok)
        fprintf(stderr, "    cut at %zu and %zu: %s\n", a, b, err.msg);
    return ok;
}

static void test_every_cut_gives_the_same_split(void)
{
    for (size_t a = 0; a <= sizeof(MSG); a++)
        for (size_t b = a; b <= sizeof(MSG); b++)
            ASSERT_TRUE(split_at(a, b));
}

static void test_pieces_follow_the_cuts(void)
{
    /* Cut inside the first raw entry: it comes in two pieces. */
    infd_data_segment in[2] = { { MSG, 9 }, { MSG + 9, sizeof(MSG) - 9 } };
    infd_arena ar;
    infd_arena_init(&ar, 0);
    grpc_wire_raw raw[4];
    const uint8_t *rest;
    size_t rest_n;
    int n_raw;
    infd_error err = { 0 };
    ASSERT_EQ_INT(grpc_wire_split(&ar, in, 2, &rest, &rest_n, raw, 4, &n_raw, &err),
                  INFD_STATUS_OK);
    ASSERT_EQ_INT(raw[0].n_pieces, 2);
    ASSERT_TRUE(raw[0].pieces[0].data == MSG + 5 && raw[0].pieces[0].nbytes == 4);
    ASSERT_TRUE(raw[0].pieces[1].data == MSG + 9 && raw[0].pieces[1].nbytes == 6);
    infd_arena_fini(&ar);
}

static void test_one_piece_without_raw_is_not_copied(void)
{
    infd_data_segment in[1] = { { REST, sizeof(REST) } };
    infd_arena ar;
    infd_arena_init(&ar, 0);
    grpc_wire_raw raw[4];
    const uint8_t *rest;
    size_t rest_n;
    int n_raw;
    infd_error err = { 0 };
    ASSERT_EQ_INT(grpc_wire_split(&ar, in, 1, &rest, &rest_n, raw, 4, &n_raw, &err),
                  INFD_STATUS_OK);
    ASSERT_EQ_INT(n_raw, 0);
    ASSERT_TRUE(rest == REST && rest_n == sizeof(REST));
    /* Empty: no fields at all. */
    in[0].nbytes = 0;
    ASSERT_EQ_INT(grpc_wire_split(&ar, in, 1, &rest, &rest_n, raw, 4, &n_raw, &err),
                  INFD_STATUS_OK);
    ASSERT_EQ_U64(rest_n, 0);
    ASSERT_EQ_INT(grpc_wire_split(&ar, NULL, 0, &rest, &rest_n, raw, 4, &n_raw, &err),
                  INFD_STATUS_OK);
    ASSERT_EQ_U64(rest_n, 0);
    infd_arena_fini(&ar);
}

/* The status of splitting `n` bytes of `p` in two pieces cut in the middle,
 * with the message in err. */
static infd_status split_bad(const uint8_t *p, size_t n, int max_raw, infd_error *err)
{
    infd_data_segment in[2] = { { p, n / 2 }, { p + n / 2, n - n / 2 } };
    infd_arena ar;
    infd_arena_init(&ar, 0);
    grpc_wire_raw raw[4];
    const uint8_t *rest;
    size_t rest_n;
    int n_raw;
    infd_error_clear(err);
    infd_status st = grpc_wire_split(&ar, in, 2, &rest, &rest_n, raw, max_raw, &n_raw, err);
    infd_arena_fini(&ar);
    return st;
}

static void test_malformed_framing_is_rejected_with_its_byte(void)
{
    infd_error err;
    /* A length past the end. */
    static const uint8_t past[] = { 0x0a, 1, 'm', 0x3a, 9, 'a', 'b' };
    ASSERT_EQ_INT(split_bad(past, sizeof(past), 4, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "malformed ModelInferRequest at byte 3 of 7");
    /* A varint that never ends. */
    static const uint8_t endless[] = { 0x40, 0xff, 0xff, 0xff };
    ASSERT_EQ_INT(split_bad(endless, sizeof(endless), 4, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "at byte 0 of 4");
    /* An 11-byte varint. */
    static const uint8_t longv[] = { 0x40, 0xff, 0xff, 0xff, 0xff, 0xff,
                                     0xff, 0xff, 0xff, 0xff, 0xff, 0x01 };
    ASSERT_EQ_INT(split_bad(longv, sizeof(longv), 4, &err), INFD_STATUS_INVALID_ARGUMENT);
    /* Group wire types (3, 4) and the unused ones (6, 7). */
    for (uint8_t wt = 3; wt <= 7; wt++) {
        if (wt == 5)
            continue;
        uint8_t g[] = { 0x0a, 1, 'm', (uint8_t)((9 << 3) | wt), 0 };
        ASSERT_EQ_INT(split_bad(g, sizeof(g), 4, &err), INFD_STATUS_INVALID_ARGUMENT);
        ASSERT_STR_HAS(err.msg, "at byte 3 of 5");
    }
    /* A fixed64 cut short. */
    static const uint8_t short64[] = { 0x49, 1, 2, 3 };
    ASSERT_EQ_INT(split_bad(short64, sizeof(short64), 4, &err), INFD_STATUS_INVALID_ARGUMENT);
    /* Too many raw entries. */
    ASSERT_EQ_INT(split_bad(MSG, sizeof(MSG), 2, &err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(err.msg, "more than 2 raw_input_contents");
}

TEST_MAIN(test_every_cut_gives_the_same_split, test_pieces_follow_the_cuts,
          test_one_piece_without_raw_is_not_copied,
          test_malformed_framing_is_rejected_with_its_byte)
