/* SPDX-License-Identifier: Apache-2.0 */
/*
 * storage.c — optional backing storage for block bytes.
 *
 * What it owns: the host arenas (one per stream with block_bytes set) and the
 * one place where block bytes move (copy-on-write and relocation).
 *
 * Two modes, chosen by configuration: a host arena that kvpool maps itself
 * (page aligned, transparent huge pages requested with madvise and simply
 * not used when the system refuses), or caller memory anywhere (a GPU, Metal)
 * reached only through the caller's copy hook.  Either way the pool calls
 * kvp__storage_copy before a move becomes visible, so a sequence never sees
 * a block id whose bytes are not there yet.
 *
 * The arena is mapped with mmap rather than through the allocator hook: it
 * needs page alignment and huge-page advice that a malloc-style hook cannot
 * give.  It grows with the pool (a new mapping, contents copied).
 */
#include "storage.h"
#include "events.h"
#include "guard.h"
#include "mem.h"
#include "record.h"

#include <sys/mman.h>

/* Bytes of stream s's arena for ncap ids.  Exact: ncap never exceeds the
 * growth cap, and kvp_pool_create refuses a block_bytes whose arena at the
 * cap would not fit size_t, so this product and every block address below
 * it (id x block_bytes, id < ncap) are in range. */
static size_t arena_size(const kvp_pool *p, int s, uint32_t ncap)
{
    return p->cfg.block_bytes[s] * (size_t)ncap;
}

static uint8_t *map_arena(size_t bytes)
{
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(m, bytes, MADV_HUGEPAGE); /* advice only: fine if refused */
#endif
    return m;
}

/* Map each stream's next arena (kvp__arena.next) for `ncap` blocks, holding
 * the current contents; streams without bytes get none.  All or nothing:
 * on ENOMEM no arena is left mapped. */
kvp_status kvp__storage_reserve(kvp_pool *p, uint32_t ncap)
{
    for (int s = 0; s < kvp__streams(p) && p->store.arenas; s++) {
        kvp__arena *a = &p->store.arenas[s];
        size_t bytes = arena_size(p, s, ncap);
        if (!bytes)
            continue;
        a->next = map_arena(bytes);
        if (!a->next) {
            kvp__storage_unreserve(p, ncap);
            return KVP_ENOMEM;
        }
        if (a->base)
            memcpy(a->next, a->base, arena_size(p, s, p->top));
    }
    return KVP_OK;
}

/* Unmap the arenas kvp__storage_reserve mapped for `ncap` blocks. */
void kvp__storage_unreserve(kvp_pool *p, uint32_t ncap)
{
    for (int s = 0; s < kvp__streams(p) && p->store.arenas; s++) {
        kvp__arena *a = &p->store.arenas[s];
        if (a->next)
            munmap(a->next, arena_size(p, s, ncap));
        a->next = NULL;
    }
}

/* Make the reserved arenas the streams' own, for `ncap` blocks. */
void kvp__storage_commit(kvp_pool *p, uint32_t ncap)
{
    for (int s = 0; s < kvp__streams(p) && p->store.arenas; s++) {
        kvp__arena *a = &p->store.arenas[s];
        if (!a->next)
            continue;
        if (a->base)
            munmap(a->base, a->bytes);
        a->base = a->next;
        a->bytes = arena_size(p, s, ncap);
        a->next = NULL;
    }
}

/* The streams' arena records and their first arenas, for the pool's
 * capacity; nothing without host_arena. */
kvp_status kvp__storage_init(kvp_pool *p)
{
    if (!p->cfg.host_arena)
        return KVP_OK;
    p->store.arenas = kvp__zalloc(p, (size_t)p->nstreams * sizeof *p->store.arenas);
    if (!p->store.arenas)
        return KVP_ENOMEM;
    kvp_status rc = kvp__storage_reserve(p, p->cap);
    if (!rc)
        kvp__storage_commit(p, p->cap);
    return rc;
}

/* Unmap every arena and release their records. */
void kvp__storage_free(kvp_pool *p)
{
    if (!p->store.arenas)
        return;
    for (int s = 0; s < kvp__streams(p); s++)
        if (p->store.arenas[s].base)
            munmap(p->store.arenas[s].base, p->store.arenas[s].bytes);
    kvp__release(p, p->store.arenas, (size_t)p->nstreams * sizeof *p->store.arenas);
    p->store.arenas = NULL;
}

/* Copy block src's bytes to block dst (stream s): within the arena, or
 * through the caller's hook (a callback: it may not call into the pool). */
void kvp__storage_copy(kvp_pool *p, int s, uint32_t src, uint32_t dst)
{
    size_t bytes = p->cfg.block_bytes[s];
    uint8_t *base = p->store.arenas ? p->store.arenas[s].base : NULL;
    if (base) {
        memcpy(base + dst * bytes, base + src * bytes, bytes);
    } else if (p->cfg.copy) {
        const kvp_pool *outer = kvp__cb_pool;
        kvp__cb_pool = p;
        p->cfg.copy(p->cfg.copy_user, kvp__stream_value(p, s), src, dst);
        kvp__cb_pool = outer;
    }
}

kvp_status kvp_block_ptr(kvp_pool *pool, kvp_block id, void **out)
{
    if (!pool || !out || !pool->cfg.host_arena)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    rc = id < pool->top && kvp__state(pool, id) != KVP_BLOCK_RETIRED ? KVP_OK : KVP_ERANGE;
    int s = rc ? 0 : kvp__stream_of(pool, id);
    if (!rc && !pool->store.arenas[s].base)
        rc = KVP_EINVAL;
    if (!rc)
        *out = pool->store.arenas[s].base + id * pool->cfg.block_bytes[s];
    kvp__leave(pool, false);
    return rc;
}
