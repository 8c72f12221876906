/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvp_checked.h — checked arithmetic: the one way the library and the
 * interop part compute a size or a position from values a caller or a
 * configuration chose.
 *
 * Each helper stores the exact result and returns true, or returns false
 * and leaves *out alone when the result does not fit its type, so the
 * caller refuses the input before it allocates, indexes or changes
 * anything.  Built on the compilers' __builtin_*_overflow, exact for every
 * operand value.
 *
 * A leaf: standard headers only, so the interop part, which otherwise sees
 * only the public header, includes it by path.  Sizes the pool computes
 * from its own 32-bit counts (blocks, owners, events, history) times a
 * record size or the block size stay below 2^32 x 2^18 and need none of
 * this with a 64-bit size_t.
 */
#ifndef KVP_CHECKED_H
#define KVP_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out = a * b, unless that overflows size_t. */
static inline bool kvp__mul_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* *out = a + b, unless that overflows uint64_t. */
static inline bool kvp__add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

#endif /* KVP_CHECKED_H */
