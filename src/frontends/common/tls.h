/*
 * tls.h - TLS contexts from PEM files for the frontends (HTTPS through
 * libevent's OpenSSL bufferevents) and `infd perf` (issue #24). Errors name
 * the file and give OpenSSL's reason, so a wrong path, a key that does not
 * match its certificate or a file that is not PEM stops the server at start
 * with a message that says which.
 */
#ifndef INFD_FRONTENDS_COMMON_TLS_H
#define INFD_FRONTENDS_COMMON_TLS_H

#include <stddef.h>

#include "infd/infd.h"

typedef struct ssl_ctx_st SSL_CTX;

/* A server context: `cert` (the certificate chain) and `key` (its private
 * key), TLS 1.2 or later. With `client_ca`, every client must present a
 * certificate that one of its CAs signed (mutual TLS); NULL: none is asked
 * for. `what` prefixes the messages ("http"). */
infd_status infd_tls_server_ctx(const char *what, const char *cert, const char *key,
                                const char *client_ca, SSL_CTX **out, infd_error *err);

/* A client context that verifies the server against `ca` (NULL: the
 * system's store) and, with `cert` and `key`, presents a certificate. */
infd_status infd_tls_client_ctx(const char *what, const char *ca, const char *cert, const char *key,
                                SSL_CTX **out, infd_error *err);

/* The whole of a PEM file as a NUL-terminated string (infd_free), for gRPC
 * core's credentials, which take PEM text; at most 1 MiB. */
infd_status infd_tls_read_pem(const char *what, const char *path, char **out, infd_error *err);

#endif /* INFD_FRONTENDS_COMMON_TLS_H */
