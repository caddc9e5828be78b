/*
 * mailbox.c - the completion hand-off to a libevent loop (mailbox.h).
 */
#include "frontends/common/mailbox.h"

#include <event2/event.h>
#include <string.h>

static void **link_of(const infd_mailbox *mb, void *item)
{
    return (void **)((char *)item + mb->link_offset);
}

bool infd_mailbox_init(infd_mailbox *mb, struct event_base *base, size_t link_offset,
                       void (*on_wake)(int fd, short what, void *arg), void *arg)
{
    memset(mb, 0, sizeof(*mb));
    mb->link_offset = link_offset;
    mb->wake = event_new(base, -1, 0, on_wake, arg);
    if (!mb->wake)
        return false;
    pthread_mutex_init(&mb->mu, NULL);
    return true;
}

void infd_mailbox_fini(infd_mailbox *mb)
{
    if (!mb->wake)
        return;
    event_free(mb->wake);
    mb->wake = NULL;
    pthread_mutex_destroy(&mb->mu);
}

void infd_mailbox_post(infd_mailbox *mb, void *item)
{
    pthread_mutex_lock(&mb->mu);
    bool was_empty = mb->head == NULL;
    *link_of(mb, item) = mb->head;
    mb->head = item;
    pthread_mutex_unlock(&mb->mu);
    if (was_empty)
        event_active(mb->wake, EV_READ, 0);
}

void *infd_mailbox_take(infd_mailbox *mb)
{
    pthread_mutex_lock(&mb->mu);
    void *list = mb->head;
    mb->head = NULL;
    pthread_mutex_unlock(&mb->mu);
    /* Newest first as posted: reversed, oldest first. */
    void *out = NULL;
    while (list) {
        void *next = *link_of(mb, list);
        *link_of(mb, list) = out;
        out = list;
        list = next;
    }
    return out;
}
