/* SPDX-License-Identifier: Apache-2.0 */
/*
 * encode.c — the msgpack encoding of one batch of KV-cache events, exactly
 * as vLLM's ZmqEventPublisher puts it on the wire (kvpool_interop.h,
 * docs/EVENTS.md).
 *
 * What it owns: kvpi_buf, kvpi_encode_batch, kvpi_now.
 *
 * Built on msgpack-c's packer (which always picks the shortest integer and
 * string forms, as Python's msgpack and msgspec do), writing straight into a
 * growable buffer that the publisher reuses from batch to batch, so steady
 * state publishing does not allocate.  Kept apart from the sockets so the
 * exact bytes can be tested without ZeroMQ.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */

#include "kvpool_interop.h"

#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void kvpi_buf_free(kvpi_buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* msgpack_packer_write callback: append to a kvpi_buf. */
static int buf_write(void *user, const char *bytes, size_t len)
{
    kvpi_buf *b = user;
    if (b->cap - b->len < len) {
        size_t ncap = b->cap ? b->cap : 256;
        while (ncap - b->len < len) {
            if (ncap > SIZE_MAX / 2)
                return -1;
            ncap *= 2;
        }
        uint8_t *nd = realloc(b->data, ncap);
        if (!nd)
            return -1;
        b->data = nd;
        b->cap = ncap;
    }
    memcpy(b->data + b->len, bytes, len);
    b->len += len;
    return 0;
}

double kvpi_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* msgpack counts an array's elements and a string's bytes in 32 bits;
 * msgpack-c truncates a larger count into the header, which would leave
 * the elements that follow misread, so such an array or string is refused
 * (the batch is malformed) before anything of it is written. */
static int pack_array(msgpack_packer *pk, size_t n)
{
    return n > UINT32_MAX ? -1 : msgpack_pack_array(pk, n);
}

static int pack_cstr(msgpack_packer *pk, const char *s)
{
    size_t len = strlen(s);
    return len > UINT32_MAX ? -1 : msgpack_pack_str(pk, len) || msgpack_pack_str_body(pk, s, len);
}

static int pack_cstr_or_nil(msgpack_packer *pk, const char *s)
{
    return s ? pack_cstr(pk, s) : msgpack_pack_nil(pk);
}

static int pack_hashes(msgpack_packer *pk, const uint64_t *h, size_t n)
{
    if (n && !h)
        return -1;
    int rc = pack_array(pk, n);
    for (size_t i = 0; i < n && !rc; i++)
        rc = msgpack_pack_uint64(pk, h[i]);
    return rc;
}

/* One multimodal hash as 64 lowercase hex digits. */
static int pack_mm_hex(msgpack_packer *pk, const kvp_hash *h)
{
    static const char digits[] = "0123456789abcdef";
    char hex[64];
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[h->b[i] >> 4];
        hex[2 * i + 1] = digits[h->b[i] & 15];
    }
    return msgpack_pack_str(pk, sizeof hex) || msgpack_pack_str_body(pk, hex, sizeof hex);
}

/* extra_keys: nil without multimodal inputs; otherwise one entry per block,
 * each the array of the hex identifiers of the inputs that block overlaps
 * (kvp_event.mm lists them block by block, mm_per_block says how many are
 * each block's).  See docs/EVENTS.md. */
static int pack_extra_keys(msgpack_packer *pk, const kvp_event *e)
{
    if (e->n_mm == 0)
        return msgpack_pack_nil(pk);
    if (!e->mm || !e->mm_per_block)
        return -1;
    int rc = pack_array(pk, e->n_hashes);
    size_t at = 0;
    for (size_t b = 0; b < e->n_hashes && !rc; b++) {
        uint32_t k = e->mm_per_block[b];
        if (at + k > e->n_mm)
            return -1;
        rc = msgpack_pack_array(pk, k);
        for (uint32_t i = 0; i < k && !rc; i++)
            rc = pack_mm_hex(pk, &e->mm[at + i]);
        at += k;
    }
    return rc;
}

static int pack_stored(msgpack_packer *pk, const kvp_event *e)
{
    if (e->n_tokens && !e->tokens)
        return -1;
    int rc = msgpack_pack_array(pk, 12) || pack_cstr(pk, "BlockStored") ||
             pack_hashes(pk, e->hashes, e->n_hashes) ||
             (e->has_parent ? msgpack_pack_uint64(pk, e->parent) : msgpack_pack_nil(pk)) ||
             pack_array(pk, e->n_tokens);
    for (size_t i = 0; i < e->n_tokens && !rc; i++)
        rc = msgpack_pack_uint32(pk, e->tokens[i]);
    return rc || msgpack_pack_uint32(pk, e->block_size) ||
           msgpack_pack_nil(pk) /* lora_id: deprecated in vLLM, never sent */ ||
           pack_cstr_or_nil(pk, e->medium) || pack_cstr_or_nil(pk, e->lora_name) ||
           pack_extra_keys(pk, e) || msgpack_pack_uint32(pk, 0) /* group_idx */ ||
           msgpack_pack_nil(pk) /* kv_cache_spec_kind */ ||
           msgpack_pack_nil(pk) /* kv_cache_spec_sliding_window */;
}

static int pack_removed(msgpack_packer *pk, const kvp_event *e)
{
    return msgpack_pack_array(pk, 4) || pack_cstr(pk, "BlockRemoved") ||
           pack_hashes(pk, e->hashes, e->n_hashes) || pack_cstr_or_nil(pk, e->medium) ||
           msgpack_pack_uint32(pk, 0) /* group_idx */;
}

int kvpi_encode_batch(const kvp_event *events, size_t n, double timestamp, int64_t dp_rank,
                      kvpi_buf *out)
{
    if (!out || (n && !events))
        return -1;
    out->len = 0;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, buf_write);
    int rc = msgpack_pack_array(&pk, 3) || msgpack_pack_double(&pk, timestamp) ||
             pack_array(&pk, n);
    for (size_t i = 0; i < n && !rc; i++) {
        const kvp_event *e = &events[i];
        switch (e->kind) {
        case KVP_EVENT_STORED:
            rc = pack_stored(&pk, e);
            break;
        case KVP_EVENT_REMOVED:
            rc = pack_removed(&pk, e);
            break;
        case KVP_EVENT_ALL_CLEARED:
            rc = msgpack_pack_array(&pk, 1) || pack_cstr(&pk, "AllBlocksCleared");
            break;
        default:
            rc = -1;
        }
    }
    if (!rc)
        rc = dp_rank == KVPI_NO_DP_RANK ? msgpack_pack_nil(&pk) : msgpack_pack_int64(&pk, dp_rank);
    return rc ? -1 : 0;
}
