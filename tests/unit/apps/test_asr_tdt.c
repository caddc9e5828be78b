/*
 * test_tdt.c - TDT greedy decoding (src/apps/asr/tdt.h) on hand-built
 * joint outputs: a script says what the joint answers at each call, and
 * the tests check the frames it was asked about, the predictor's inputs
 * and the tokens, against NeMo's label-looping semantics.
 */
#include <string.h>

#include "apps/asr/tdt.h"
#include "test.h"

#define V     5 /* tokens 0..4; blank 5 */
#define BLANK V

/* The joint's answers, in call order: (token, duration index); the frames
 * it was asked about and the tokens the predictor got are recorded. */
typedef struct script {
    int tok[64], dur[64];
    int n, at;
    int64_t asked[64];
    int n_asked;
    int fed[64];
    int n_fed;
} script;

static infd_status joint(void *user, int64_t t, int *token, int *duration, infd_error *err)
{
    script *s = user;
    if (s->at >= s->n)
        return infd_error_set(err, INFD_STATUS_INTERNAL, "script exhausted at frame %lld",
                              (long long)t);
    s->asked[s->n_asked++] = t;
    *token = s->tok[s->at];
    *duration = s->dur[s->at];
    s->at++;
    return INFD_STATUS_OK;
}

static infd_status predict(void *user, int token, infd_error *err)
{
    (void)err;
    script *s = user;
    s->fed[s->n_fed++] = token;
    return INFD_STATUS_OK;
}

static asr_tdt_config parakeet(int max_symbols)
{
    asr_tdt_config c = {
        .vocab = V, .durations = { 0, 1, 2, 3, 4 }, .n_durations = 5, .max_symbols = max_symbols
    };
    return c;
}

/* Appends (token, duration index) pairs to the script. */
static void say(script *s, int n, const int *pairs)
{
    for (int i = 0; i < n; i++) {
        s->tok[s->n] = pairs[2 * i];
        s->dur[s->n] = pairs[2 * i + 1];
        s->n++;
    }
}

/* One decoder under test: a script, the config, the state, a token buffer. */
typedef struct fixture {
    script s;
    asr_tdt_config c;
    asr_tdt_nets nets;
    asr_tdt_state st;
    asr_tdt_token out[64];
    int64_t n;
    infd_error err;
} fixture;

static void fixture_init(fixture *f, int max_symbols)
{
    memset(f, 0, sizeof(*f));
    f->c = parakeet(max_symbols);
    f->nets = (asr_tdt_nets){ &f->s, joint, predict };
    asr_tdt_state_reset(&f->st);
    f->n = -1;
}

/* Decodes a chunk of T frames into f->out[0, cap). */
static infd_status decode_chunk(fixture *f, int64_t T, int64_t cap)
{
    return asr_tdt_decode(&f->c, &f->nets, &f->st, T, f->out, cap, &f->n, &f->err);
}

static void test_blank_duration_zero_moves_on(void)
{
    /* Blank with duration 0 is taken as 1: frames 0, 1, 2 each asked once. */
    fixture f;
    fixture_init(&f, 10);
    say(&f.s, 3, (const int[]){ BLANK, 0, BLANK, 0, BLANK, 0 });
    ASSERT_STATUS(decode_chunk(&f, 3, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 0);
    ASSERT_EQ_INT(f.s.n_asked, 3);
    ASSERT_EQ_I64(f.s.asked[0], 0);
    ASSERT_EQ_I64(f.s.asked[1], 1);
    ASSERT_EQ_I64(f.s.asked[2], 2);
    ASSERT_EQ_INT(f.s.n_fed, 1); /* only the start-of-sequence blank */
    ASSERT_EQ_INT(f.s.fed[0], BLANK);
    ASSERT_EQ_I64(f.st.time_jump, 0);
    ASSERT_EQ_I64(f.st.frames_done, 3);
}

static void test_several_tokens_on_one_frame(void)
{
    /* Frame 0: token 1 (d 0), token 2 (d 0), token 3 (d 2); frame 2: blank
     * (d 1), which ends the 3-frame chunk with nothing carried. */
    fixture f;
    fixture_init(&f, 10);
    say(&f.s, 4, (const int[]){ 1, 0, 2, 0, 3, 2, BLANK, 1 });
    ASSERT_STATUS(decode_chunk(&f, 3, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 3);
    ASSERT_EQ_INT(f.out[0].id, 1);
    ASSERT_EQ_INT(f.out[1].id, 2);
    ASSERT_EQ_INT(f.out[2].id, 3);
    ASSERT_EQ_I64(f.out[0].frame, 0);
    ASSERT_EQ_I64(f.out[1].frame, 0);
    ASSERT_EQ_I64(f.out[2].frame, 0);
    ASSERT_EQ_INT(f.out[2].duration, 2);
    /* The joint ran three times on frame 0 (with a new predictor output
     * each time), then on frame 2. */
    ASSERT_EQ_INT(f.s.n_asked, 4);
    ASSERT_EQ_I64(f.s.asked[2], 0);
    ASSERT_EQ_I64(f.s.asked[3], 2);
    /* The predictor: the start blank, then each token, never the blank. */
    ASSERT_EQ_INT(f.s.n_fed, 4);
    ASSERT_EQ_INT(f.s.fed[1], 1);
    ASSERT_EQ_INT(f.s.fed[3], 3);
    ASSERT_EQ_I64(f.st.time_jump, 0);
}

static void test_max_symbols_forces_a_blank(void)
{
    /* max_symbols 3: three d-0 tokens on frame 0, then the decoder moves to
     * frame 1 by itself (the joint is not asked about frame 0 again). */
    fixture f;
    fixture_init(&f, 3);
    say(&f.s, 4, (const int[]){ 4, 0, 4, 0, 4, 0, BLANK, 1 });
    ASSERT_STATUS(decode_chunk(&f, 2, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 3);
    ASSERT_EQ_INT(f.s.n_asked, 4);
    ASSERT_EQ_I64(f.s.asked[3], 1);
    ASSERT_EQ_I64(f.st.time_jump, 0);
}

static void test_max_symbols_not_forced_after_a_duration(void)
{
    /* max_symbols 2: the second token on frame 0 has d 1, so no blank is
     * forced: the next joint call is on frame 1, and frame 1 may emit. */
    fixture f;
    fixture_init(&f, 2);
    say(&f.s, 3, (const int[]){ 1, 0, 2, 1, 3, 4 });
    ASSERT_STATUS(decode_chunk(&f, 3, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 3);
    ASSERT_EQ_I64(f.out[2].frame, 1);
    ASSERT_EQ_INT(f.out[2].duration, 4);
    /* 1 + 4 = 5 past a 3-frame chunk: 2 frames carried. */
    ASSERT_EQ_I64(f.st.time_jump, 2);
}

static void test_overshoot_carried_into_next_chunk(void)
{
    /* Chunk 1 (4 frames): frame 0 blank d 3 -> frame 3: token 2 with d 4,
     * emitted though 3 + 4 goes past 4: 3 frames carried. Chunk 2 (5 frames)
     * starts at its frame 3 (absolute 7). */
    fixture f;
    fixture_init(&f, 10);
    say(&f.s, 2, (const int[]){ BLANK, 3, 2, 4 });
    ASSERT_STATUS(decode_chunk(&f, 4, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 1);
    ASSERT_EQ_I64(f.out[0].frame, 3);
    ASSERT_EQ_I64(f.st.time_jump, 3);
    say(&f.s, 2, (const int[]){ 1, 1, BLANK, 1 });
    ASSERT_STATUS(decode_chunk(&f, 5, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 1);
    ASSERT_EQ_I64(f.s.asked[2], 3); /* the chunk's own frame index */
    ASSERT_EQ_I64(f.out[0].frame, 7);
    ASSERT_EQ_I64(f.st.time_jump, 0);
    ASSERT_EQ_I64(f.st.frames_done, 9);
    /* The start blank primed the predictor once, not per chunk. */
    ASSERT_EQ_INT(f.s.n_fed, 3);
}

static void test_overshoot_past_a_whole_chunk(void)
{
    /* A carried jump longer than the next chunk skips it entirely. */
    fixture f;
    fixture_init(&f, 10);
    say(&f.s, 1, (const int[]){ 1, 4 }); /* frame 0 of a 1-frame chunk: d 4 */
    ASSERT_STATUS(decode_chunk(&f, 1, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.st.time_jump, 3);
    ASSERT_STATUS(decode_chunk(&f, 2, 64), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 0);
    ASSERT_EQ_I64(f.st.time_jump, 1);
    ASSERT_EQ_INT(f.s.n_asked, 1);
}

static void test_empty_utterance(void)
{
    fixture f;
    fixture_init(&f, 10);
    ASSERT_STATUS(decode_chunk(&f, 0, 4), INFD_STATUS_OK);
    ASSERT_EQ_I64(f.n, 0);
    ASSERT_EQ_INT(f.s.n_asked, 0);
    ASSERT_EQ_I64(f.st.frames_done, 0);
}

static void test_bad_joint_output_and_full_buffer(void)
{
    fixture f;
    fixture_init(&f, 10);
    say(&f.s, 1, (const int[]){ V + 1, 0 }); /* token past the blank */
    ASSERT_STATUS(decode_chunk(&f, 2, 1), INFD_STATUS_INTERNAL);
    ASSERT_STR_HAS(f.err.msg, "token 6");
    fixture_init(&f, 10);
    say(&f.s, 2, (const int[]){ 1, 1, 2, 1 }); /* two tokens, room for one */
    ASSERT_STATUS(decode_chunk(&f, 2, 1), INFD_STATUS_RESOURCE_EXHAUSTED);
    asr_tdt_config bad = f.c;
    bad.n_durations = 0;
    ASSERT_STATUS(asr_tdt_config_check(&bad, &f.err), INFD_STATUS_INVALID_ARGUMENT);
    ASSERT_STR_HAS(f.err.msg, "durations");
    ASSERT_STATUS(asr_tdt_config_check(&f.c, &f.err), INFD_STATUS_OK);
}

TEST_MAIN(test_blank_duration_zero_moves_on, test_several_tokens_on_one_frame,
          test_max_symbols_forces_a_blank, test_max_symbols_not_forced_after_a_duration,
          test_overshoot_carried_into_next_chunk, test_overshoot_past_a_whole_chunk,
          test_empty_utterance, test_bad_joint_output_and_full_buffer)
