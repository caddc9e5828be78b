/*
 * shm.c - the server's shared-memory regions (Triton's system shared-memory
 * extension; infd.h has the contract).
 *
 * A region is a POSIX shared memory object the client made (shm_open) and
 * registered under a name: [offset, offset + byte_size) of it, mapped once
 * at register, read and written in place by requests. Regions are
 * refcounted: the table holds one reference and every request that uses
 * the region one more, so a region unregistered while requests read or
 * write it is taken out of the table at once (its name may be registered
 * again) and unmapped when the last request lets go.
 *
 * A CUDA region (Triton's CUDA shared-memory extension) is device memory
 * the client exported with cudaIpcGetMemHandle, opened here from that
 * handle (infd_engine_ipc_open) and closed when the last user lets go.
 * Its byte_size may not exceed what the client allocated (the driver says
 * how much), so no request can reach past the client's memory. System and
 * CUDA regions share one namespace, as in Triton.
 *
 * Every offset and size is checked with checked arithmetic: offsets past
 * the end were a Triton CVE class. Messages name the region, never its key
 * (another one: CVE-2025-23320, shared/reference/reliability-and-ecosystem.md).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "runtime/runtime.h"

_Static_assert(INFD_SHM_CUDA_HANDLE_BYTES == INFD_IPC_HANDLE_BYTES, "one handle size");

struct infd_shm_region {
    infd_shm_region *next; /* the table's list */
    atomic_int refs;       /* the table's (while registered) and each user's */
    char name[INFD_SHM_NAME_BYTES];
    char key[INFD_SHM_KEY_BYTES];
    uint64_t offset, byte_size;
    void *map; /* the mapping, from the page holding `offset` */
    size_t map_len;
    uint8_t *data; /* the region's first byte in the mapping (CUDA: on the device) */
    int device;    /* -1: system memory; else the CUDA device it is on */
};

void rt_shm_init(rt_shm_table *t, unsigned kinds)
{
    memset(t, 0, sizeof(*t));
    pthread_mutex_init(&t->mu, NULL);
    t->kinds = kinds;
}

static void region_unref(infd_shm_region *r)
{
    if (atomic_fetch_sub(&r->refs, 1) != 1)
        return;
    if (r->device >= 0)
        infd_engine_ipc_close(INFD_DEVICE_CUDA, r->device, r->data);
    else
        munmap(r->map, r->map_len);
    infd_free(r);
}

void rt_shm_fini(rt_shm_table *t)
{
    while (t->head) {
        infd_shm_region *r = t->head;
        t->head = r->next;
        region_unref(r);
    }
    pthread_mutex_destroy(&t->mu);
}

static infd_status shm_enabled(const rt_shm_table *t, unsigned kind, infd_error *err)
{
    if (t->kinds & kind)
        return INFD_STATUS_OK;
    const char *what = kind == INFD_SHM_CUDA ? "cuda" : "system";
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "%s shared memory is off: start the server with "
                          "--enable-shared-memory %s",
                          kind == INFD_SHM_CUDA ? "CUDA" : what, what);
}

/* The kind of a region. */
static unsigned kind_of(const infd_shm_region *r)
{
    return r->device >= 0 ? INFD_SHM_CUDA : INFD_SHM_SYSTEM;
}

/* Region names: 1 to 127 bytes, printable, no '/' (they travel in URLs). */
static bool name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= INFD_SHM_NAME_BYTES)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x21 || name[i] == 0x7f || name[i] == '/')
            return false;
    return true;
}

static infd_status name_error(infd_error *err)
{
    return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                          "a region name is 1 to %d printable bytes without '/'",
                          INFD_SHM_NAME_BYTES - 1);
}

/* POSIX object names as shm_open takes them portably: "/" then 1 to 254
 * bytes without a slash, and not "." or "..". */
static bool key_ok(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n < 2 || n >= INFD_SHM_KEY_BYTES || key[0] != '/' || strchr(key + 1, '/'))
        return false;
    if (strcmp(key, "/.") == 0 || strcmp(key, "/..") == 0)
        return false;
    for (size_t i = 1; i < n; i++)
        if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
            return false;
    return true;
}

static infd_shm_region *find_locked(rt_shm_table *t, const char *name)
{
    for (infd_shm_region *r = t->head; r; r = r->next)
        if (strcmp(r->name, name) == 0)
            return r;
    return NULL;
}

/* Adds `r` to the table unless its name is taken (then frees it). */
static infd_status insert(rt_shm_table *t, infd_shm_region *r, infd_error *err)
{
    pthread_mutex_lock(&t->mu);
    bool taken = find_locked(t, r->name) != NULL;
    if (!taken) {
        r->next = t->head;
        t->head = r;
    }
    pthread_mutex_unlock(&t->mu);
    if (taken) {
        infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                       "region '%s' is registered already: unregister it first", r->name);
        region_unref(r);
        return INFD_STATUS_INVALID_ARGUMENT;
    }
    INFD_LOG_INFO("%s shared memory region '%s' registered (%llu bytes)",
                  r->device >= 0 ? "CUDA" : "system", r->name, (unsigned long long)r->byte_size);
    return INFD_STATUS_OK;
}

infd_status infd_server_shm_register(infd_server *s, const char *name, const char *key,
                                     uint64_t offset, uint64_t byte_size, infd_error *err)
{
    rt_shm_table *t = rt_server_shm(s);
    infd_status st = shm_enabled(t, INFD_SHM_SYSTEM, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (!name_ok(name))
        return name_error(err);
    if (!key_ok(key))
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': the key must be a POSIX shared memory name: '/' then "
                              "1 to %d bytes without '/', not '/.' or '/..'",
                              name, INFD_SHM_KEY_BYTES - 2);
    uint64_t end;
    if (byte_size == 0 || __builtin_add_overflow(offset, byte_size, &end) ||
        end > (uint64_t)SIZE_MAX || end > (uint64_t)INT64_MAX)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': offset %llu and byte_size %llu: byte_size must be at "
                              "least 1 and their sum must not overflow",
                              name, (unsigned long long)offset, (unsigned long long)byte_size);
    int fd = shm_open(key, O_RDWR, 0);
    if (fd < 0) {
        int e = errno;
        return infd_error_set(
            err, e == ENOENT ? INFD_STATUS_NOT_FOUND : INFD_STATUS_INVALID_ARGUMENT,
            "region '%s': cannot open its shared memory object: %s", name, strerror(e));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': cannot stat its shared memory object: %s", name,
                              strerror(e));
    }
    if ((uint64_t)sb.st_size < end) {
        close(fd);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': offset %llu + byte_size %llu is past the end of its "
                              "shared memory object (%lld bytes)",
                              name, (unsigned long long)offset, (unsigned long long)byte_size,
                              (long long)sb.st_size);
    }
    long page = sysconf(_SC_PAGESIZE);
    uint64_t map_off = offset & ~(uint64_t)(page - 1);
    size_t map_len = (size_t)(end - map_off);
    void *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)map_off);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT, "region '%s': cannot map it: %s",
                              name, strerror(e));
    infd_shm_region *r = infd_calloc(1, sizeof(*r));
    if (!r) {
        munmap(map, map_len);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    snprintf(r->name, sizeof(r->name), "%s", name);
    snprintf(r->key, sizeof(r->key), "%s", key);
    r->offset = offset;
    r->byte_size = byte_size;
    r->map = map;
    r->map_len = map_len;
    r->data = (uint8_t *)map + (offset - map_off);
    r->device = -1;
    atomic_init(&r->refs, 1);
    return insert(t, r, err);
}

infd_status infd_server_cuda_shm_register(infd_server *s, const char *name, const void *raw_handle,
                                          size_t handle_bytes, int device_id, uint64_t byte_size,
                                          infd_error *err)
{
    rt_shm_table *t = rt_server_shm(s);
    infd_status st = shm_enabled(t, INFD_SHM_CUDA, err);
    if (st != INFD_STATUS_OK)
        return st;
    if (!name_ok(name))
        return name_error(err);
    if (!raw_handle || handle_bytes != INFD_IPC_HANDLE_BYTES)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': raw_handle must be a cudaIpcMemHandle_t (%d bytes), "
                              "not %zu bytes",
                              name, INFD_IPC_HANDLE_BYTES, raw_handle ? handle_bytes : 0);
    if (byte_size == 0 || byte_size > (uint64_t)INT64_MAX)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': byte_size %llu must be 1 to 2^63-1", name,
                              (unsigned long long)byte_size);
    if (device_id < 0)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': device_id %d is not a device", name, device_id);
    size_t have = 0;
    void *dev =
        infd_engine_ipc_open(INFD_DEVICE_CUDA, device_id, raw_handle, handle_bytes, &have, err);
    if (!dev)
        return infd_error_prefix(err, "region '%s' on CUDA device %d", name, device_id);
    if (byte_size > have) {
        infd_engine_ipc_close(INFD_DEVICE_CUDA, device_id, dev);
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "region '%s': byte_size %llu is more than the %zu bytes the handle's "
                              "allocation holds",
                              name, (unsigned long long)byte_size, have);
    }
    infd_shm_region *r = infd_calloc(1, sizeof(*r));
    if (!r) {
        infd_engine_ipc_close(INFD_DEVICE_CUDA, device_id, dev);
        return infd_error_set(err, INFD_STATUS_OUT_OF_MEMORY, "out of memory");
    }
    snprintf(r->name, sizeof(r->name), "%s", name);
    r->byte_size = byte_size;
    r->data = dev;
    r->device = device_id;
    atomic_init(&r->refs, 1);
    return insert(t, r, err);
}

/* Unregisters region `name` of `kind`, or every one of that kind. */
static infd_status unregister_kind(infd_server *s, unsigned kind, const char *name, infd_error *err)
{
    rt_shm_table *t = rt_server_shm(s);
    infd_status st = shm_enabled(t, kind, err);
    if (st != INFD_STATUS_OK)
        return st;
    bool all = !name || !*name;
    infd_shm_region *gone = NULL;
    pthread_mutex_lock(&t->mu);
    for (infd_shm_region **p = &t->head; *p;) {
        infd_shm_region *r = *p;
        if (kind_of(r) == kind && (all || strcmp(r->name, name) == 0)) {
            *p = r->next;
            r->next = gone;
            gone = r;
            if (!all)
                break;
        } else {
            p = &r->next;
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (!all && !gone)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "no %s shared memory region '%.127s' is registered",
                              kind == INFD_SHM_CUDA ? "CUDA" : "system", name);
    while (gone) {
        infd_shm_region *r = gone;
        gone = r->next;
        INFD_LOG_INFO("%s shared memory region '%s' unregistered",
                      kind == INFD_SHM_CUDA ? "CUDA" : "system", r->name);
        region_unref(r); /* unmapped now, or when its last request lets go */
    }
    return INFD_STATUS_OK;
}

infd_status infd_server_shm_unregister(infd_server *s, const char *name, infd_error *err)
{
    return unregister_kind(s, INFD_SHM_SYSTEM, name, err);
}

infd_status infd_server_cuda_shm_unregister(infd_server *s, const char *name, infd_error *err)
{
    return unregister_kind(s, INFD_SHM_CUDA, name, err);
}

/* Calls fn for region `name` of `kind` or for every one of that kind. */
static infd_status status_kind(infd_server *s, unsigned kind, const char *name,
                               void (*fn)(void *user, const infd_shm_region *r), void *user,
                               infd_error *err)
{
    rt_shm_table *t = rt_server_shm(s);
    infd_status st = shm_enabled(t, kind, err);
    if (st != INFD_STATUS_OK)
        return st;
    bool all = !name || !*name, found = false;
    pthread_mutex_lock(&t->mu);
    for (infd_shm_region *r = t->head; r; r = r->next) {
        if (kind_of(r) != kind || (!all && strcmp(r->name, name) != 0))
            continue;
        fn(user, r);
        found = true;
    }
    pthread_mutex_unlock(&t->mu);
    if (!all && !found)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "no %s shared memory region '%.127s' is registered",
                              kind == INFD_SHM_CUDA ? "CUDA" : "system", name);
    return INFD_STATUS_OK;
}

typedef struct status_call {
    void (*sys)(void *user, const infd_shm_info *info);
    void (*cuda)(void *user, const infd_cuda_shm_info *info);
    void *user;
} status_call;

static void status_row(void *user, const infd_shm_region *r)
{
    const status_call *c = user;
    if (r->device < 0) {
        infd_shm_info info = { r->name, r->key, r->offset, r->byte_size };
        c->sys(c->user, &info);
    } else {
        infd_cuda_shm_info info = { r->name, r->device, r->byte_size };
        c->cuda(c->user, &info);
    }
}

infd_status infd_server_shm_status(infd_server *s, const char *name,
                                   void (*fn)(void *user, const infd_shm_info *info), void *user,
                                   infd_error *err)
{
    status_call c = { fn, NULL, user };
    return status_kind(s, INFD_SHM_SYSTEM, name, status_row, &c, err);
}

infd_status infd_server_cuda_shm_status(infd_server *s, const char *name,
                                        void (*fn)(void *user, const infd_cuda_shm_info *info),
                                        void *user, infd_error *err)
{
    status_call c = { NULL, fn, user };
    return status_kind(s, INFD_SHM_CUDA, name, status_row, &c, err);
}

infd_status infd_server_shm_acquire(infd_server *s, const char *name, uint64_t offset,
                                    uint64_t byte_size, infd_shm_region **region, void **data,
                                    infd_error *err)
{
    rt_shm_table *t = rt_server_shm(s);
    *region = NULL;
    *data = NULL;
    if (!t->kinds)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "shared memory is off: start the server with "
                              "--enable-shared-memory system (or cuda)");
    pthread_mutex_lock(&t->mu);
    infd_shm_region *r = find_locked(t, name ? name : "");
    uint64_t have = r ? r->byte_size : 0;
    bool fits = r && offset <= have && byte_size <= have - offset;
    if (fits)
        atomic_fetch_add(&r->refs, 1);
    pthread_mutex_unlock(&t->mu);
    if (!r)
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "no shared memory region '%.127s' is registered", name ? name : "");
    if (!fits) /* r may be gone already: only `name` is named */
        return infd_error_set(err, INFD_STATUS_INVALID_ARGUMENT,
                              "shared memory region '%.127s' holds %llu bytes: offset %llu + "
                              "byte_size %llu does not fit",
                              name, (unsigned long long)have, (unsigned long long)offset,
                              (unsigned long long)byte_size);
    *region = r;
    *data = r->data + offset;
    return INFD_STATUS_OK;
}

int infd_shm_region_device(const infd_shm_region *region)
{
    return region ? region->device : -1;
}

void infd_shm_region_release(infd_shm_region *region)
{
    if (region)
        region_unref(region);
}

unsigned infd_server_shared_memory(const infd_server *s)
{
    return rt_server_shm((infd_server *)s)->kinds;
}
