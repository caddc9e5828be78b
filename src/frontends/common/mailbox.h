/*
 * mailbox.h - the completion hand-off from any thread to one libevent loop:
 * runtime threads post finished items (a request's callback), the loop
 * takes them all at once and answers on its own thread. One copy for the
 * loop components (the Redis queue, the cluster's worker link); http.c's
 * and raw.c's older ones are still their own (STYLE.md §10).
 *
 * Items are the caller's structs with a `void *` link field at
 * `link_offset`; the mailbox holds no memory of its own. Posting wakes the
 * loop (event_active on a user event, which libevent makes thread-safe with
 * evthread_use_pthreads) only when the box was empty, so a burst costs one
 * wake-up. Take returns the items oldest first.
 */
#ifndef INFD_FRONTENDS_COMMON_MAILBOX_H
#define INFD_FRONTENDS_COMMON_MAILBOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

struct event;
struct event_base;

typedef struct infd_mailbox {
    pthread_mutex_t mu;
    void *head; /* newest first */
    size_t link_offset;
    struct event *wake;
} infd_mailbox;

/* `on_wake(-1, 0, arg)` runs on the loop when items arrive; it calls
 * infd_mailbox_take. False when the event cannot be made. */
bool infd_mailbox_init(infd_mailbox *mb, struct event_base *base, size_t link_offset,
                       void (*on_wake)(int fd, short what, void *arg), void *arg);
void infd_mailbox_fini(infd_mailbox *mb);

/* Any thread. */
void infd_mailbox_post(infd_mailbox *mb, void *item);

/* Every item posted so far, oldest first, linked through their link field
 * (NULL-terminated); the box is empty after. Any thread. */
void *infd_mailbox_take(infd_mailbox *mb);

#endif /* INFD_FRONTENDS_COMMON_MAILBOX_H */
