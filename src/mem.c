/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mem.c — the library's memory: the allocator hook and the three calls every
 * other file allocates and releases through.
 *
 * What it owns: the default allocator and kvp__alloc, kvp__zalloc,
 * kvp__release.  A leaf: it calls nothing of the library.
 *
 * Invariant: every byte the pool holds came through p->mem (the caller's
 * kvp_allocator, or the default one here) with its size, and goes back
 * through kvp__release with the same size, so a counting allocator sees
 * every allocation the pool makes.
 */
#include "mem.h"

#include <stdlib.h>
#include <sys/mman.h>

/* The default allocator maps large blocks directly: fresh mappings are zero
 * and cost nothing until touched, whatever malloc's heap holds (glibc may
 * serve a big calloc from its heap and clear it, which for a 1M-block pool
 * costs tens of times the creation itself). */
#define KVP__MAP_MIN ((size_t)1 << 20)

static void *std_alloc(void *user, size_t size)
{
    (void)user;
    if (size < KVP__MAP_MIN)
        return malloc(size);
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? NULL : m;
}

static void std_release(void *user, void *ptr, size_t size)
{
    (void)user;
    if (size < KVP__MAP_MIN)
        free(ptr);
    else
        munmap(ptr, size);
}

const kvp_allocator kvp__std_allocator = {std_alloc, std_release, NULL};

/* Uninitialised memory; with cfg.prefault written once, for the reason
 * kvp__zalloc gives. */
void *kvp__alloc(kvp_pool *p, size_t size)
{
    void *m = size ? p->mem.alloc(p->mem.user, size) : NULL;
    if (m && p->cfg.prefault)
        memset(m, 0, size);
    return m;
}

/* Zeroed memory.  With the default allocator large blocks are fresh
 * mappings, already zero and untouched: the reason a big pool is cheap to
 * make.  With cfg.prefault they are written anyway, which faults every page
 * in now rather than in the call that first touches it. */
void *kvp__zalloc(kvp_pool *p, size_t size)
{
    if (!size)
        return NULL;
    bool fresh = p->mem.alloc == std_alloc;
    void *m = !fresh                 ? p->mem.alloc(p->mem.user, size)
              : size < KVP__MAP_MIN ? calloc(1, size)
                                    : std_alloc(NULL, size);
    if (m && (!fresh || p->cfg.prefault))
        memset(m, 0, size);
    return m;
}

/* Give back memory of `size` bytes from kvp__alloc or kvp__zalloc (NULL:
 * nothing). */
void kvp__release(kvp_pool *p, void *ptr, size_t size)
{
    if (ptr)
        p->mem.release(p->mem.user, ptr, size);
}
