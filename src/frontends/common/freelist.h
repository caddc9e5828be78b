/*
 * freelist.h - recycled per-call records for the loop components (the
 * cluster's worker link and router): a call's struct comes from the list
 * and goes back to it, so steady traffic allocates nothing. Thread-safe (a
 * call may end on ZeroMQ's I/O thread); at most `cap` records are kept.
 * Records are `size` bytes and come back with their first `zeroed` bytes
 * zeroed (0: all of them; a record whose large tail is always written
 * before it is read need not pay for clearing it); `link_offset` is a
 * `void *` field the list may use while a record is on it.
 */
#ifndef INFD_FRONTENDS_COMMON_FREELIST_H
#define INFD_FRONTENDS_COMMON_FREELIST_H

#include <pthread.h>
#include <stddef.h>

typedef struct infd_freelist {
    pthread_mutex_t mu;
    void *head;
    size_t size, zeroed, link_offset;
    int n, cap;
} infd_freelist;

void infd_freelist_init(infd_freelist *fl, size_t size, size_t zeroed, size_t link_offset, int cap);
/* Frees what is kept. */
void infd_freelist_fini(infd_freelist *fl);
/* A record (its first `zeroed` bytes zeroed), or NULL when out of memory. */
void *infd_freelist_get(infd_freelist *fl);
void infd_freelist_put(infd_freelist *fl, void *item);

#endif /* INFD_FRONTENDS_COMMON_FREELIST_H */
