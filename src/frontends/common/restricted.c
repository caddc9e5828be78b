/*
 * restricted.c - access control with Triton's syntax (restricted.h).
 */
#include "frontends/common/restricted.h"

#include <ctype.h>
#include <openssl/crypto.h>
#include <string.h>

static const char *const g_names[INFD_API_COUNT] = {
    [INFD_API_HEALTH] = "health",
    [INFD_API_METADATA] = "metadata",
    [INFD_API_INFERENCE] = "inference",
    [INFD_API_SHARED_MEMORY] = "shared-memory",
    [INFD_API_MODEL_CONFIG] = "model-config",
    [INFD_API_MODEL_REPOSITORY] = "model-repository",
    [INFD_API_STATISTICS] = "statistics",
    [INFD_API_TRACE] = "trace",
    [INFD_API_LOGGING] = "logging",
};

const char *infd_api_name(infd_api api)
{
    return api >= 0 && api < INFD_API_COUNT ? g_names[api] : "?";
}

infd_status infd_restricted_add(infd_restricted *r, const char *flag, const char *spec,
                                infd_error *err)
{
    const char *colon = strchr(spec, ':');
    const char *eq = colon ? strchr(colon + 1, '=') : NULL;
    if (!colon || !eq || colon == spec)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: expected <apis>:<key>=<value>, e.g. "
                              "model-repository,shared-memory:admin-key=SECRET",
                              flag);
    size_t key_len = (size_t)(eq - colon - 1);
    const char *value = eq + 1;
    size_t value_len = strlen(value);
    if (key_len == 0 || key_len >= INFD_RESTRICTED_KEY_BYTES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: the key must be 1 to %d characters", flag,
                              INFD_RESTRICTED_KEY_BYTES - 1);
    for (size_t i = 0; i < key_len; i++) {
        unsigned char ch = (unsigned char)colon[1 + i];
        if (!isalnum(ch) && ch != '-' && ch != '_')
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: the key may hold letters, digits, '-' and '_' only", flag);
    }
    if (value_len == 0 || value_len >= INFD_RESTRICTED_VALUE_BYTES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "%s: the value must be 1 to %d bytes", flag,
                              INFD_RESTRICTED_VALUE_BYTES - 1);
    /* Every group named, checked before any is set. */
    bool pick[INFD_API_COUNT] = { false };
    for (const char *p = spec;;) {
        const char *end = memchr(p, ',', (size_t)(colon - p));
        if (!end)
            end = colon;
        size_t n = (size_t)(end - p);
        if (n == 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: an empty API name in the list before ':'", flag);
        int found = -1;
        for (int a = 0; a < INFD_API_COUNT; a++)
            if (strlen(g_names[a]) == n && memcmp(g_names[a], p, n) == 0)
                found = a;
        if (found < 0)
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: unknown API '%.*s' (health, metadata, inference, "
                                  "shared-memory, model-config, model-repository, statistics, "
                                  "trace, logging)",
                                  flag, (int)(n > 64 ? 64 : n), p);
        if (r->api[found].key[0] || pick[found])
            return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                                  "%s: API '%s' is restricted twice (a group may be in one "
                                  "rule only)",
                                  flag, g_names[found]);
        pick[found] = true;
        if (end == colon)
            break;
        p = end + 1;
    }
    for (int a = 0; a < INFD_API_COUNT; a++) {
        if (!pick[a])
            continue;
        infd_restricted_rule *rule = &r->api[a];
        for (size_t i = 0; i < key_len; i++)
            rule->key[i] = (char)tolower((unsigned char)colon[1 + i]);
        rule->key[key_len] = '\0';
        memset(rule->value, 0, sizeof(rule->value));
        memcpy(rule->value, value, value_len);
        rule->value_len = value_len;
    }
    return INFD_STATUS_OK;
}

bool infd_restricted_allows(const infd_restricted *r, infd_api api, const char *got, size_t got_len)
{
    if (!r || api < 0 || api >= INFD_API_COUNT || !r->api[api].key[0])
        return true;
    if (!got || got_len >= INFD_RESTRICTED_VALUE_BYTES)
        return false;
    /* Both zero-padded to the full size and compared whole: the time does
     * not depend on where they differ. */
    unsigned char padded[INFD_RESTRICTED_VALUE_BYTES] = { 0 };
    memcpy(padded, got, got_len);
    int diff = CRYPTO_memcmp(padded, r->api[api].value, sizeof(padded));
    return (diff | (int)(got_len != r->api[api].value_len)) == 0;
}
