/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_decode.c — turns a received KV-cache event batch (msgpack bytes a
 * peer controls) into JSON lines or text (event_decode.h).
 *
 * What it owns: the subscriber's view of the wire format — field names by
 * tag (docs/EVENTS.md), and the escaping that keeps any input printable.
 *
 * Invariants: before msgpack-c sees the bytes, counts_fit() walks them and
 * refuses any array or map whose claimed element count exceeds the bytes
 * left (every element takes at least one byte), so msgpack-c's zone never
 * allocates more than one msgpack_object per input byte; msgpack-c itself
 * refuses nesting deeper than 32, which bounds the recursion here.  Every
 * string goes through put_text(), which never emits a control character or
 * invalid UTF-8.  Every object is printed once, in at most a few dozen
 * characters per input byte (the longest: a nil field after its name), so
 * the output is linear in the input; map keys that are arrays or maps are
 * summarised, never rendered inside a string.
 *
 * Why built this way: JSON is written by hand because block hashes are
 * unsigned 64-bit integers, which a signed-integer JSON library would
 * mangle; the subscriber prints the wire format as it is, by tag, with no
 * knowledge of kvpool, so it can watch vLLM engines too.
 */
#include "event_decode.h"

#include <inttypes.h>
#include <math.h>
#include <msgpack.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Bounding the decoder                                                      */
/* ------------------------------------------------------------------------ */

/* Big-endian unsigned of `n` bytes (1, 2 or 4). */
static uint64_t be_n(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/*
 * 1 when d[0..len) starts with one complete msgpack object in which no
 * array or map claims more elements, and no string, binary or extension
 * more bytes, than the input has left; else 0.  Iterative: `pending` counts
 * the objects still to read, and may never exceed the bytes left.  O(len).
 */
static int counts_fit(const uint8_t *d, size_t len)
{
    size_t pos = 0;
    uint64_t pending = 1;
    while (pending) {
        if (pos >= len)
            return 0;
        uint8_t b = d[pos++];
        pending--;
        uint64_t skip = 0, children = 0;
        size_t lenf = 0; /* bytes of a length field that follows */
        int kind = 0;    /* with lenf: 's' skip it, 'e' skip it + a type byte,
                            'a' that many children, 'm' twice that many */
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
            ;                                  /* fixint, nil, bool */
        else if (b <= 0x8f)
            children = 2u * (b & 0x0f);        /* fixmap */
        else if (b <= 0x9f)
            children = b & 0x0f;               /* fixarray */
        else if (b <= 0xbf)
            skip = b & 0x1f;                   /* fixstr */
        else if (b >= 0xc4 && b <= 0xc6)
            lenf = (size_t)1 << (b - 0xc4), kind = 's'; /* bin 8/16/32 */
        else if (b >= 0xc7 && b <= 0xc9)
            lenf = (size_t)1 << (b - 0xc7), kind = 'e'; /* ext 8/16/32 */
        else if (b == 0xca || b == 0xcb)
            skip = b == 0xca ? 4 : 8;          /* float 32/64 */
        else if (b >= 0xcc && b <= 0xd3)
            skip = (uint64_t)1 << ((b - 0xcc) & 3); /* uint/int 8..64 */
        else if (b >= 0xd4 && b <= 0xd8)
            skip = 1 + ((uint64_t)1 << (b - 0xd4)); /* fixext 1..16 */
        else if (b >= 0xd9 && b <= 0xdb)
            lenf = (size_t)1 << (b - 0xd9), kind = 's'; /* str 8/16/32 */
        else if (b == 0xdc || b == 0xdd)
            lenf = b == 0xdc ? 2 : 4, kind = 'a';  /* array 16/32 */
        else if (b == 0xde || b == 0xdf)
            lenf = b == 0xde ? 2 : 4, kind = 'm';  /* map 16/32 */
        else
            return 0; /* 0xc1: never used */
        if (lenf) {
            if (len - pos < lenf)
                return 0;
            uint64_t v = be_n(d + pos, lenf);
            pos += lenf;
            if (kind == 's')
                skip = v;
            else if (kind == 'e')
                skip = v + 1;
            else
                children = kind == 'a' ? v : 2 * v;
        }
        if (skip > len - pos)
            return 0;
        pos += (size_t)skip;
        pending += children;
        if (pending > len - pos)
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Safe text                                                                 */
/* ------------------------------------------------------------------------ */

/* Length (2..4) of the well-formed UTF-8 sequence starting a multibyte
 * character at s[0..n), with its code point in *cp; 0 when malformed
 * (stray continuation, truncated, overlong, surrogate, past U+10FFFF). */
static size_t utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
    size_t k;
    uint32_t c, min;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        k = 2, c = s[0] & 0x1f, min = 0x80;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        k = 3, c = s[0] & 0x0f, min = 0x800;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        k = 4, c = s[0] & 0x07, min = 0x10000;
    else
        return 0;
    if (n < k)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return k;
}

/*
 * Write s[0..n) so that no control character (C0, DEL, C1) or invalid UTF-8
 * reaches the output.  json: as the inside of a JSON string (controls as
 * \u00XX, invalid bytes as \ufffd, '"' and '\' escaped); else for a
 * terminal (controls and invalid bytes as \xNN, '\' doubled).
 */
static void put_text(FILE *f, const char *str, size_t n, int json)
{
    const unsigned char *s = (const unsigned char *)str;
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        uint32_t cp = c;
        size_t k = c < 0x80 ? 1 : utf8_seq(s + i, n - i, &cp);
        if (k == 0) { /* invalid: one byte at a time */
            if (json)
                fputs("\\ufffd", f);
            else
                fprintf(f, "\\x%02x", c);
            i++;
            continue;
        }
        if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f))
            fprintf(f, json ? "\\u%04" PRIx32 : "\\x%02" PRIx32, cp);
        else if (c == '\\' || (json && c == '"'))
            fprintf(f, "\\%c", c);
        else
            fwrite(s + i, 1, k, f);
        i += k;
    }
}

void kvpt_json_text(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    put_text(f, s, n, 1);
    fputc('"', f);
}

/* ------------------------------------------------------------------------ */
/* JSON output                                                               */
/* ------------------------------------------------------------------------ */

static void json_obj(FILE *f, const msgpack_object *o);

/* A map key as a JSON string: a string as itself, binary as its hex, a
 * scalar as its JSON text ("7", "null"), an array or a map as a summary
 * ("array of 2").  Compound keys are summarised, not rendered: each level
 * of a key rendered inside a string would escape the level below again,
 * doubling its backslashes, so nested keys would grow the output
 * exponentially with depth. */
static void json_key(FILE *f, const msgpack_object *k)
{
    switch (k->type) {
    case MSGPACK_OBJECT_STR:
    case MSGPACK_OBJECT_BIN:
    case MSGPACK_OBJECT_EXT:
        json_obj(f, k); /* already a JSON string */
        break;
    case MSGPACK_OBJECT_ARRAY:
        fprintf(f, "\"array of %" PRIu32 "\"", k->via.array.size);
        break;
    case MSGPACK_OBJECT_MAP:
        fprintf(f, "\"map of %" PRIu32 "\"", k->via.map.size);
        break;
    default: /* nil, boolean, numbers: no character that needs escaping */
        fputc('"', f);
        json_obj(f, k);
        fputc('"', f);
    }
}

/* Any msgpack object as JSON: binary and extensions as hex strings,
 * non-finite floats as null. */
static void json_obj(FILE *f, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        fputs("null", f);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        fputs(o->via.boolean ? "true" : "false", f);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        fprintf(f, "%" PRIu64, o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        fprintf(f, "%" PRId64, o->via.i64);
        break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (isfinite(o->via.f64))
            fprintf(f, "%.17g", o->via.f64);
        else
            fputs("null", f);
        break;
    case MSGPACK_OBJECT_STR:
        kvpt_json_text(f, o->via.str.ptr, o->via.str.size);
        break;
    case MSGPACK_OBJECT_BIN:
    case MSGPACK_OBJECT_EXT: {
        const char *p = o->type == MSGPACK_OBJECT_BIN ? o->via.bin.ptr : o->via.ext.ptr;
        uint32_t n = o->type == MSGPACK_OBJECT_BIN ? o->via.bin.size : o->via.ext.size;
        fputc('"', f);
        for (uint32_t i = 0; i < n; i++)
            fprintf(f, "%02x", (unsigned char)p[i]);
        fputc('"', f);
        break;
    }
    case MSGPACK_OBJECT_ARRAY:
        fputc('[', f);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (i)
                fputc(',', f);
            json_obj(f, &o->via.array.ptr[i]);
        }
        fputc(']', f);
        break;
    case MSGPACK_OBJECT_MAP:
        fputc('{', f);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            if (i)
                fputc(',', f);
            json_key(f, &o->via.map.ptr[i].key);
            fputc(':', f);
            json_obj(f, &o->via.map.ptr[i].val);
        }
        fputc('}', f);
        break;
    default:
        fputs("null", f);
    }
}

/* Field names of each event, after its tag (docs/EVENTS.md). */
static const char *const stored_fields[] = {
    "block_hashes", "parent_block_hash", "token_ids",  "block_size",
    "lora_id",      "medium",            "lora_name",  "extra_keys",
    "group_idx",    "kv_cache_spec_kind", "kv_cache_spec_sliding_window"};
static const char *const removed_fields[] = {"block_hashes", "medium", "group_idx"};

static int tag_is(const msgpack_object *o, const char *tag)
{
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(tag) &&
           memcmp(o->via.str.ptr, tag, o->via.str.size) == 0;
}

/* The field names of a tagged event array, or NULL for anything else. */
static const char *const *fields_of(const msgpack_object *ev, size_t *n)
{
    *n = 0;
    if (ev->type != MSGPACK_OBJECT_ARRAY || ev->via.array.size == 0)
        return NULL;
    const msgpack_object *tag = &ev->via.array.ptr[0];
    if (tag_is(tag, "BlockStored")) {
        *n = sizeof stored_fields / sizeof *stored_fields;
        return stored_fields;
    }
    if (tag_is(tag, "BlockRemoved")) {
        *n = sizeof removed_fields / sizeof *removed_fields;
        return removed_fields;
    }
    return tag_is(tag, "AllBlocksCleared") ? stored_fields : NULL;
}

static void json_event(FILE *f, const msgpack_object *ev)
{
    size_t nf;
    const char *const *names = fields_of(ev, &nf);
    if (!names) { /* an unknown tag, or not a tagged array */
        fputs("{\"type\":", f);
        if (ev->type == MSGPACK_OBJECT_ARRAY && ev->via.array.size)
            json_obj(f, &ev->via.array.ptr[0]);
        else
            fputs("null", f);
        fputs(",\"raw\":", f);
        json_obj(f, ev);
        fputc('}', f);
        return;
    }
    fputs("{\"type\":", f);
    json_obj(f, &ev->via.array.ptr[0]);
    for (uint32_t i = 1; i < ev->via.array.size; i++) {
        if (i - 1 < nf)
            fprintf(f, ",\"%s\":", names[i - 1]);
        else
            fprintf(f, ",\"field%" PRIu32 "\":", i);
        json_obj(f, &ev->via.array.ptr[i]);
    }
    fputc('}', f);
}

/* ------------------------------------------------------------------------ */
/* Text output                                                               */
/* ------------------------------------------------------------------------ */

/* Human form of one event: its tag, then each non-nil named field. */
static void print_event(FILE *f, const msgpack_object *ev)
{
    size_t nf;
    const char *const *names = fields_of(ev, &nf);
    if (!names) {
        fputs("  ? ", f);
        json_obj(f, ev);
        fputc('\n', f);
        return;
    }
    const msgpack_object *a = ev->via.array.ptr;
    uint32_t n = ev->via.array.size;
    fputs("  ", f);
    put_text(f, a[0].via.str.ptr, a[0].via.str.size, 0);
    for (uint32_t i = 1; i < n && i - 1 < nf; i++) {
        const msgpack_object *v = &a[i];
        if (v->type == MSGPACK_OBJECT_NIL)
            continue;
        if (strcmp(names[i - 1], "token_ids") == 0 && v->type == MSGPACK_OBJECT_ARRAY) {
            fprintf(f, " tokens=%" PRIu32, v->via.array.size);
            continue;
        }
        fprintf(f, " %s=", names[i - 1]);
        if (v->type == MSGPACK_OBJECT_STR)
            put_text(f, v->via.str.ptr, v->via.str.size, 0);
        else
            json_obj(f, v);
    }
    fputc('\n', f);
}

int kvpt_event_print(FILE *f, int json, const char *topic, size_t topic_len, uint64_t seq,
                     const char *data, size_t len)
{
    if (!counts_fit((const uint8_t *)data, len))
        return -1;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int ok = msgpack_unpack_next(&u, data, len, &off) == MSGPACK_UNPACK_SUCCESS &&
             u.data.type == MSGPACK_OBJECT_ARRAY && u.data.via.array.size >= 2 &&
             u.data.via.array.ptr[1].type == MSGPACK_OBJECT_ARRAY;
    if (!ok) {
        msgpack_unpacked_destroy(&u);
        return -1;
    }
    const msgpack_object *b = u.data.via.array.ptr;
    const msgpack_object *evs = &b[1];
    if (evs->via.array.size == 0) { /* the end-of-stream marker */
        msgpack_unpacked_destroy(&u);
        return 1;
    }
    const msgpack_object *dp = u.data.via.array.size > 2 ? &b[2] : NULL;
    if (json) {
        fputs("{\"topic\":", f);
        kvpt_json_text(f, topic, topic_len);
        fprintf(f, ",\"seq\":%" PRIu64 ",\"ts\":", seq);
        json_obj(f, &b[0]);
        fputs(",\"dp_rank\":", f);
        if (dp)
            json_obj(f, dp);
        else
            fputs("null", f);
        fputs(",\"events\":[", f);
        for (uint32_t i = 0; i < evs->via.array.size; i++) {
            if (i)
                fputc(',', f);
            json_event(f, &evs->via.array.ptr[i]);
        }
        fputs("]}\n", f);
    } else {
        fprintf(f, "batch %" PRIu64 " ", seq);
        json_obj(f, &b[0]);
        fprintf(f, " (%" PRIu32 " events)\n", evs->via.array.size);
        for (uint32_t i = 0; i < evs->via.array.size; i++)
            print_event(f, &evs->via.array.ptr[i]);
    }
    fflush(f);
    msgpack_unpacked_destroy(&u);
    return 0;
}
