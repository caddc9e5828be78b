/*
 * tls.c - TLS contexts from PEM files (tls.h).
 */
#include "frontends/common/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "infd/infd.h"

#define PEM_MAX_BYTES (1u << 20)

/* OpenSSL's reason for the last failure (its queue is then cleared). */
static const char *ossl_reason(char *buf, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    if (e == 0)
        snprintf(buf, n, "unknown error");
    else
        ERR_error_string_n(e, buf, n);
    ERR_clear_error();
    return buf;
}

static infd_status fail(const char *what, const char *role, const char *path, SSL_CTX *ctx,
                        infd_error *err)
{
    char why[256];
    ossl_reason(why, sizeof(why));
    SSL_CTX_free(ctx);
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: TLS %s '%s': %s", what, role,
                          path, why);
}

/* A readable file, or a clear message (OpenSSL's would say only "system lib"). */
static infd_status check_readable(const char *what, const char *role, const char *path,
                                  infd_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: TLS %s '%s': %s", what, role,
                              path, strerror(errno));
    fclose(f);
    return INFD_STATUS_OK;
}

static infd_status load_pair(const char *what, SSL_CTX *ctx, const char *cert, const char *key,
                             infd_error *err)
{
    infd_status st;
    if ((st = check_readable(what, "certificate", cert, err)) != INFD_STATUS_OK ||
        (st = check_readable(what, "key", key, err)) != INFD_STATUS_OK) {
        SSL_CTX_free(ctx);
        return st;
    }
    if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1)
        return fail(what, "certificate", cert, ctx, err);
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1)
        return fail(what, "key", key, ctx, err);
    if (SSL_CTX_check_private_key(ctx) != 1)
        return fail(what, "key (does it belong to the certificate?)", key, ctx, err);
    return INFD_STATUS_OK;
}

static infd_status load_ca(const char *what, SSL_CTX *ctx, const char *ca, infd_error *err)
{
    infd_status st = check_readable(what, "CA", ca, err);
    if (st != INFD_STATUS_OK) {
        SSL_CTX_free(ctx);
        return st;
    }
    if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1)
        return fail(what, "CA", ca, ctx, err);
    return INFD_STATUS_OK;
}

infd_status infd_tls_server_ctx(const char *what, const char *cert, const char *key,
                                const char *client_ca, SSL_CTX **out, infd_error *err)
{
    *out = NULL;
    if (!cert || !key)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: TLS needs both a certificate and a key", what);
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: TLS context", what);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* No session cache across the loops' threads: each handshake is whole. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    infd_status st = load_pair(what, ctx, cert, key, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (client_ca) {
        if ((st = load_ca(what, ctx, client_ca, err)) != INFD_STATUS_OK)
            return st;
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca);
        if (names)
            SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    *out = ctx;
    return INFD_STATUS_OK;
}

infd_status infd_tls_client_ctx(const char *what, const char *ca, const char *cert, const char *key,
                                SSL_CTX **out, infd_error *err)
{
    *out = NULL;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: TLS context", what);
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    infd_status st;
    if (ca) {
        if ((st = load_ca(what, ctx, ca, err)) != INFD_STATUS_OK)
            return st;
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        return fail(what, "CA", "(system store)", ctx, err);
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if ((cert || key) && (st = load_pair(what, ctx, cert ? cert : "(none)", key ? key : "(none)",
                                         err)) != INFD_STATUS_OK)
        return st;
    *out = ctx;
    return INFD_STATUS_OK;
}

infd_status infd_tls_read_pem(const char *what, const char *path, char **out, infd_error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: '%s': %s", what, path,
                              strerror(errno));
    char *buf = infd_malloc(PEM_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "%s: '%s'", what, path);
    }
    size_t n = fread(buf, 1, PEM_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n == 0 || n > PEM_MAX_BYTES || !memmem(buf, n, "-----BEGIN ", 11)) {
        infd_free(buf);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "%s: '%s': %s", what, path,
                              bad                 ? "read error"
                              : n == 0            ? "empty"
                              : n > PEM_MAX_BYTES ? "larger than 1 MiB"
                                                  : "not PEM (no -----BEGIN line)");
    }
    buf[n] = '\0';
    *out = buf;
    return INFD_STATUS_OK;
}
