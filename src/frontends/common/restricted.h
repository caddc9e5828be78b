/*
 * restricted.h - access control with Triton's syntax (issue #24):
 * `--http-restricted-api <apis>:<key>=<value>` and
 * `--grpc-restricted-protocol <apis>:<key>=<value>`. A request to an API of
 * a restricted group must carry the group's key with its value: as the HTTP
 * header `<key>: <value>`, or as the gRPC metadata
 * `triton-grpc-protocol-<key>: <value>` (Triton's names, so its clients
 * work unchanged). The value is compared in constant time; error messages
 * name the header, never the value.
 */
#ifndef INFD_FRONTENDS_COMMON_RESTRICTED_H
#define INFD_FRONTENDS_COMMON_RESTRICTED_H

#include <stdbool.h>
#include <stddef.h>

#include "infd/infd.h"

/* Triton's API groups. */
typedef enum infd_api {
    INFD_API_HEALTH,
    INFD_API_METADATA,
    INFD_API_INFERENCE,
    INFD_API_SHARED_MEMORY,
    INFD_API_MODEL_CONFIG,
    INFD_API_MODEL_REPOSITORY,
    INFD_API_STATISTICS,
    INFD_API_TRACE,
    INFD_API_LOGGING,
    INFD_API_COUNT
} infd_api;

#define INFD_RESTRICTED_KEY_BYTES   64
#define INFD_RESTRICTED_VALUE_BYTES 256

typedef struct infd_restricted_rule {
    char key[INFD_RESTRICTED_KEY_BYTES]; /* lower case; "" when the API is open */
    /* The value, zero-padded to its full size (compared whole). */
    unsigned char value[INFD_RESTRICTED_VALUE_BYTES];
    size_t value_len;
} infd_restricted_rule;

/* What each API group needs; zero-initialised: everything open. */
typedef struct infd_restricted {
    infd_restricted_rule api[INFD_API_COUNT];
} infd_restricted;

/* Triton's name of a group ("model-repository"). */
const char *infd_api_name(infd_api api);

/* Adds one `<apis>:<key>=<value>` (apis: a comma-separated list of group
 * names). A group may be in one rule only; keys are letters, digits, '-'
 * and '_' (at most 63), values 1 to 255 bytes. `flag` names the option in
 * messages. */
infd_status infd_restricted_add(infd_restricted *r, const char *flag, const char *spec,
                                infd_error *err);

/* True when `api` is open, or `got` (the presented value, NULL when
 * absent) equals its value; constant time in the value's content. */
bool infd_restricted_allows(const infd_restricted *r, infd_api api, const char *got,
                            size_t got_len);

/* The key `api` needs ("" when open). */
static inline const char *infd_restricted_key(const infd_restricted *r, infd_api api)
{
    return r ? r->api[api].key : "";
}

#endif /* INFD_FRONTENDS_COMMON_RESTRICTED_H */
