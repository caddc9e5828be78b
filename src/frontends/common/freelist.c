/*
 * freelist.c - recycled per-call records (freelist.h).
 */
#include "frontends/common/freelist.h"

#include <string.h>

#include "core/alloc.h"

void infd_freelist_init(infd_freelist *fl, size_t size, size_t zeroed, size_t link_offset, int cap)
{
    memset(fl, 0, sizeof(*fl));
    pthread_mutex_init(&fl->mu, NULL);
    fl->size = size;
    fl->zeroed = zeroed && zeroed < size ? zeroed : size;
    fl->link_offset = link_offset;
    fl->cap = cap;
}

void infd_freelist_fini(infd_freelist *fl)
{
    while (fl->head) {
        void *item = fl->head;
        fl->head = *(void **)((char *)item + fl->link_offset);
        infd_free(item);
    }
    pthread_mutex_destroy(&fl->mu);
}

void *infd_freelist_get(infd_freelist *fl)
{
    pthread_mutex_lock(&fl->mu);
    void *item = fl->head;
    if (item) {
        fl->head = *(void **)((char *)item + fl->link_offset);
        fl->n--;
    }
    pthread_mutex_unlock(&fl->mu);
    if (!item)
        return infd_calloc(1, fl->size);
    memset(item, 0, fl->zeroed);
    return item;
}

void infd_freelist_put(infd_freelist *fl, void *item)
{
    pthread_mutex_lock(&fl->mu);
    if (fl->n < fl->cap) {
        *(void **)((char *)item + fl->link_offset) = fl->head;
        fl->head = item;
        fl->n++;
        item = NULL;
    }
    pthread_mutex_unlock(&fl->mu);
    infd_free(item);
}
