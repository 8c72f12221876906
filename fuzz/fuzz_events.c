/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuzz_events.c — libFuzzer target for the subscriber's event decoder
 * (tools/event_decode.c), which reads bytes any publisher on the network
 * controls.
 *
 * Input layout: byte 0 picks the output (bit 0: JSON, else text) and the
 * topic length (bits 1-4, 0..15 bytes); then the topic, then the msgpack
 * payload; the sequence number is the input length.
 *
 * Oracles, besides the sanitizers (no crash, leak, overflow, or allocation
 * far beyond the input: a payload claiming 2^32 elements must be refused
 * before msgpack-c allocates for them):
 * - JSON: a decoded batch is exactly one line that jansson parses back as an
 *   object (jansson rejects invalid UTF-8, NaN and bare control
 *   characters), and the line holds no control character byte at all;
 * - text: every line is valid UTF-8 with no C0, DEL or C1 control character;
 * - a refused payload prints nothing;
 * - the output is at most OUT_PER_BYTE bytes per input byte (plus the
 *   batch line's constant part): nested map keys cannot make it grow
 *   exponentially.
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream */

#include "../tools/event_decode.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OUT_PER_BYTE 48

/* Die loudly: libFuzzer records the input. */
static void fail(const char *why, const char *out, size_t len)
{
    fprintf(stderr, "fuzz_events: %s\noutput (%zu bytes): %.*s\n", why, len,
            (int)(len > 2000 ? 2000 : len), out);
    abort();
}

/* 1 when out[0..len) is UTF-8 without control characters other than '\n'
 * (checked the long way: each code point decoded and classified). */
static int printable_utf8(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        uint32_t cp;
        size_t extra;
        if (c < 0x80) {
            cp = c;
            extra = 0;
        } else if ((c & 0xe0) == 0xc0) {
            cp = c & 0x1f;
            extra = 1;
        } else if ((c & 0xf0) == 0xe0) {
            cp = c & 0x0f;
            extra = 2;
        } else if ((c & 0xf8) == 0xf0) {
            cp = c & 0x07;
            extra = 3;
        } else {
            return 0;
        }
        if (len - i <= extra)
            return 0;
        for (size_t k = 1; k <= extra; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const uint32_t least[] = {0, 0x80, 0x800, 0x10000};
        if (cp < least[extra] || cp > 0x10ffff || (cp >= 0xd800 && cp < 0xe000))
            return 0;
        if ((cp < 0x20 && cp != '\n') || (cp >= 0x7f && cp < 0xa0))
            return 0;
        i += extra + 1;
    }
    return 1;
}

/* jansson refuses NUL inside object keys (valid JSON, but not C strings):
 * turn each escaped \u0000 into \u0001 before parsing.  Backslashes occur
 * only inside strings, each starting an escape, so walking escape by escape
 * finds exactly the NULs. */
static void unnul(char *s, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] != '\\')
            continue;
        if (s[i + 1] == 'u' && len - i >= 6 && memcmp(s + i + 2, "0000", 4) == 0)
            s[i + 5] = '1';
        i += s[i + 1] == 'u' ? 5 : 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int json = data[0] & 1;
    size_t topic_len = (size_t)(data[0] >> 1 & 0x0f);
    if (size - 1 < topic_len)
        return 0;
    const char *topic = (const char *)data + 1;
    const char *payload = topic + topic_len;
    size_t len = size - 1 - topic_len;

    char *out = NULL;
    size_t out_len = 0;
    FILE *f = open_memstream(&out, &out_len);
    if (!f)
        return 0;
    int rc = kvpt_event_print(f, json, topic, topic_len, (uint64_t)size, payload, len);
    fclose(f);
    if (rc != 0 && out_len != 0)
        fail("a refused payload printed something", out, out_len);
    if (out_len > OUT_PER_BYTE * size + 256)
        fail("the output is out of proportion to the input", out, out_len);
    if (rc == 0 && json) {
        if (out_len == 0 || out[out_len - 1] != '\n' || memchr(out, '\n', out_len - 1))
            fail("JSON output is not exactly one line", out, out_len);
        if (!printable_utf8((const unsigned char *)out, out_len))
            fail("JSON output holds a control character or invalid UTF-8", out, out_len);
        json_error_t err;
        /* reals: jansson would refuse unsigned 64-bit hashes past INT64_MAX */
        unnul(out, out_len);
        json_t *v = json_loadb(out, out_len, JSON_DECODE_INT_AS_REAL, &err);
        if (!v || !json_is_object(v))
            fail(err.text, out, out_len);
        json_decref(v);
    } else if (rc == 0 && !printable_utf8((const unsigned char *)out, out_len)) {
        fail("text output holds a control character or invalid UTF-8", out, out_len);
    }
    free(out);
    return 0;
}
