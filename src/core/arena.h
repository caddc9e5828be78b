/*
 * arena.h - a bump allocator for one lifetime (a request, a model's IR, a
 * load's scratch) that is freed, or reset, in one call.
 *
 * Caller-owned struct, libuv style: infd_arena_init / infd_arena_fini.
 * Allocations are bumped out of chunks; infd_arena_reset makes all of them
 * invalid at once and keeps the memory: when a cycle needed more than one
 * chunk, reset coalesces them into one chunk of the total size, so a
 * repeating workload (one request after another) stops calling malloc after
 * its first cycle. Not thread-safe: one arena, one thread at a time.
 */
#ifndef INFD_CORE_ARENA_H
#define INFD_CORE_ARENA_H

#include <stddef.h>

typedef struct infd_arena_chunk infd_arena_chunk;

typedef struct infd_arena {
    infd_arena_chunk *_head; /* current chunk; older ones follow ->next */
    size_t _chunk_bytes;     /* default size of a new chunk */
    size_t _used_bytes;      /* sum of bytes handed out since the last reset */
} infd_arena;

/* Prepares an empty arena whose chunks hold at least `chunk_bytes` (0: 64
 * KiB). Allocates nothing until the first infd_arena_alloc. */
void infd_arena_init(infd_arena *a, size_t chunk_bytes);

/* Frees every chunk. A no-op on a zeroed arena. */
void infd_arena_fini(infd_arena *a);

/* `n` bytes aligned to `align` (a power of two; 0 means 16). Valid until the
 * next reset or fini. NULL when memory runs out or n == 0. */
void *infd_arena_alloc(infd_arena *a, size_t n, size_t align);

/* As infd_arena_alloc, zero-filled. */
void *infd_arena_calloc(infd_arena *a, size_t n, size_t align);

/* A NUL-terminated copy of `s` in the arena; NULL on failure. */
char *infd_arena_strdup(infd_arena *a, const char *s);

/* Invalidates every allocation and keeps (coalesced) memory for reuse. */
void infd_arena_reset(infd_arena *a);

/* Bytes handed out since the last reset (padding included). */
size_t infd_arena_used_bytes(const infd_arena *a);

/* Bytes of memory the arena holds. */
size_t infd_arena_capacity_bytes(const infd_arena *a);

#endif /* INFD_CORE_ARENA_H */
