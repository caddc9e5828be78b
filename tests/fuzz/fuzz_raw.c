/*
 * fuzz_raw.c - libFuzzer target for the raw socket frontend's framed
 * requests (src/frontends/raw/raw.c, docs/RAW_PROTOCOL.md): a 32-byte
 * header and its descriptors, with and without shared-memory references
 * (flag bit 1), parsed into a request against a real server's model (not
 * submitted). Any bytes must become a request with its input slots laid out
 * inside the receive buffer, or an error with a message, never a crash, a
 * leak or an out-of-bounds read.
 *
 * Input: byte 0 picks the model (even: "sm", softmax batching up to 4;
 * odd: "sm_flat", not batching; both take LOGITS FP32 [4] and answer PROBS
 * FP32 [4]), then the header, then the descriptors (desc_bytes of the
 * header, cut to what the input holds). The server has system shared memory
 * on, with region "r" (4096 bytes) and region "s" (200 bytes at offset 100
 * of the same object) registered.
 *
 * raw.c is included (STYLE.md allows it for tests) to reach its parser.
 * Seeds: tests/fuzz/seeds-raw (requests written for this project).
 */
#include "frontends/raw/raw.c"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static infd_server *server;
static infd_model *models[2];
static infd_raw fake_raw;

static void setup(void)
{
    infd_error err;
    static const fuzz_model sm[] = { { "sm", "softmax", 4 }, { "sm_flat", "softmax", 0 } };
    server = fuzz_server_create("fuzz_raw", sm, 2, INFD_SHM_SYSTEM);
    /* One POSIX object, two regions of it; the server maps them at
     * register, so the name can go at once. */
    char key[64];
    snprintf(key, sizeof(key), "/infd-fuzz-raw-%d", (int)getpid());
    int fd = shm_open(key, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0)
        abort();
    close(fd);
    if (infd_server_shm_register(server, "r", key, 0, 4096, &err) != INFD_STATUS_OK ||
        infd_server_shm_register(server, "s", key, 100, 200, &err) != INFD_STATUS_OK)
        abort();
    shm_unlink(key);
    if (infd_server_model_acquire(server, "sm", -1, &models[0], &err) != INFD_STATUS_OK ||
        infd_server_model_acquire(server, "sm_flat", -1, &models[1], &err) != INFD_STATUS_OK)
        abort();
    fake_raw.server = server;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!server)
        setup();
    if (size < 1 + RAW_HEADER_BYTES)
        return 0;
    raw_conn *c = infd_calloc(1, sizeof(*c));
    if (!c)
        return 0;
    c->raw = &fake_raw;
    c->model = models[data[0] & 1];
    c->mode = MODE_FRAMED;
    memcpy(c->hdr, data + 1, RAW_HEADER_BYTES);
    /* The header as parse_header accepts it: magic, version, section limits
     * (a header failing those loses the framing before any descriptor). */
    const uint8_t *rest = data + 1 + RAW_HEADER_BYTES;
    size_t left = size - 1 - RAW_HEADER_BYTES;
    uint32_t desc_bytes = get_u32(c->hdr + 20);
    if (desc_bytes > RAW_MAX_DESC_BYTES || get_u64(c->hdr + 24) > RAW_MAX_DATA_BYTES) {
        infd_free(c);
        return 0;
    }
    if (desc_bytes > left)
        desc_bytes = (uint32_t)left;
    put_u32(c->hdr + 20, desc_bytes);
    if (!ensure_buf(&c->desc, &c->desc_cap, (size_t)desc_bytes + 1))
        abort();
    memcpy(c->desc, rest, desc_bytes);
    c->desc_need = desc_bytes;
    parse_desc(c);
    if (c->state == C_READ_DATA) {
        /* Every input slot lies inside the receive buffer. */
        if (!c->req)
            abort();
        for (int i = 0; i < c->n_in; i++)
            if (c->in[i].nbytes &&
                (c->in[i].off > c->rx_cap || c->in[i].nbytes > c->rx_cap - c->in[i].off))
                abort();
    } else if (c->state != C_DISCARD || !c->err_msg[0]) {
        abort(); /* an error always says what */
    }
    infd_request_destroy(c->req);
    shm_release(c);
    rx_free(c->rx);
    infd_free(c->tx);
    infd_free(c->desc);
    infd_free(c);
    return 0;
}
