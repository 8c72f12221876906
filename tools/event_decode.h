/* SPDX-License-Identifier: Apache-2.0 */
/*
 * event_decode.h — decoding KV-cache event batches as a subscriber receives
 * them (msgpack bytes from the network) into JSON lines or human-readable
 * text, for `kvpool events` and the fuzz target fuzz/fuzz_events.c.
 *
 * Needs msgpack-c (built only with the interop part).  Whatever the bytes,
 * the output is safe: JSON output is valid JSON in valid UTF-8 (invalid
 * UTF-8 becomes U+FFFD, non-finite floats null, non-string map keys strings)
 * and contains no control characters, and text output contains no control
 * characters other than its line ends.  Output is linear in the input (at
 * most a few dozen bytes per input byte).  A batch without events is the
 * end-of-stream marker kvpool's publisher sends last (docs/EVENTS.md).
 */
#ifndef KVPT_EVENT_DECODE_H
#define KVPT_EVENT_DECODE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Print one received message: with json != 0 one line
 * {"topic", "seq", "ts", "dp_rank", "events": [{"type", named fields}]},
 * else a "batch SEQ TS (N events)" line and one line per event.  `topic`
 * and `data` are arbitrary bytes.  Returns 0; 1 (nothing printed) for a
 * batch without events, the end-of-stream marker; or -1 (nothing printed)
 * when `data` is not a batch: not msgpack, not [ts, [events...], ...], nested
 * deeper than msgpack-c's 32 levels, or claiming more elements than its
 * bytes can hold (so a header claiming 2^32 elements is refused before any
 * allocation: memory stays within a small multiple of len).  O(len).
 */
int kvpt_event_print(FILE *f, int json, const char *topic, size_t topic_len, uint64_t seq,
                     const char *data, size_t len);

/* Write s[0..n) as a JSON string (quoted, escaped as above). */
void kvpt_json_text(FILE *f, const char *s, size_t n);

#endif /* KVPT_EVENT_DECODE_H */
