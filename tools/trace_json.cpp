/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_json.cpp — kvpt_trace_add_line (trace.h): one trace line parsed with
 * simdjson's DOM parser, checked and appended to the flat arrays.
 *
 * The only C++ of the tool, and the only place that knows the JSON parser:
 * it exports kvpt_trace_add_line and kvpt_trace_json_free with C linkage and
 * lets no exception out (an allocation failure becomes "out of memory").
 * simdjson validates the whole document (UTF-8, structure, numbers) at
 * several hundred MB/s; on top of it this file enforces what the trace
 * format adds to JSON, for every value of the line, ignored keys included:
 *   - the line is one object (a bare scalar is bad JSON, an array "not a
 *     JSON object");
 *   - no object has a key twice; no string or key holds U+0000;
 *   - integers fit in 64-bit signed (simdjson also accepts up to 2^64 - 1);
 *   - nesting is at most KVPT_JSON_DEPTH deep.
 * Then the fields, in order: timestamp, input_length, output_length
 * (present, integers, not negative), hash_ids (present, an array, not
 * empty, non-negative integers, ceil(input_length / 512) of them), and the
 * total input_length not overflowing.  The messages are trace.h's.
 *
 * simdjson reads up to SIMDJSON_PADDING bytes past a document, so each line
 * is copied into a padded buffer that lives with the parser in the trace.
 */
#include "trace.h"

#include <simdjson.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>
#include <vector>

/* The deepest nesting accepted: jansson's limit, which the format had. */
#define KVPT_JSON_DEPTH 2048

/* The parser and the padded copy of the line, kept across lines. */
struct kvpt_json {
    simdjson::dom::parser parser{KVPT_TRACE_MAX_LINE};
    std::vector<char> line;
    std::vector<std::string_view> keys; /* scratch for the duplicate check */
};

namespace {

/* printf into err; returns -1. */
__attribute__((format(printf, 3, 4))) int fail(char *err, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* Whether `s` holds a NUL character. */
bool has_nul(std::string_view s)
{
    return s.find('\0') != std::string_view::npos;
}

/* Check every value under `e` against the format's additions to JSON (file
 * comment); on a breach, describe it in err and return -1. */
int check_value(kvpt_json *j, simdjson::dom::element e, char *err, size_t cap)
{
    using simdjson::dom::element_type;
    switch (e.type()) {
    case element_type::OBJECT: {
        simdjson::dom::object o = e.get_object().value_unsafe();
        size_t base = j->keys.size();
        for (auto field : o) {
            if (has_nul(field.key))
                return fail(err, cap, "bad JSON: NUL character in an object key");
            j->keys.push_back(field.key);
        }
        auto first = j->keys.begin() + (std::ptrdiff_t)base;
        bool dup = false;
        if (j->keys.end() - first <= 8) { /* a trace line's few keys: compare pairs */
            for (auto a = first; a != j->keys.end() && !dup; ++a)
                dup = std::find(a + 1, j->keys.end(), *a) != j->keys.end();
        } else {
            std::sort(first, j->keys.end());
            dup = std::adjacent_find(first, j->keys.end()) != j->keys.end();
        }
        j->keys.resize(base);
        if (dup)
            return fail(err, cap, "bad JSON: duplicate object key");
        for (auto field : o)
            if (check_value(j, field.value, err, cap))
                return -1;
        return 0;
    }
    case element_type::ARRAY: {
        simdjson::dom::array a = e.get_array().value_unsafe();
        for (auto v : a)
            if (!v.is_int64() && check_value(j, v, err, cap)) /* hash ids: nothing to check */
                return -1;
        return 0;
    }
    case element_type::STRING:
        if (has_nul(std::string_view(e.get_string().value_unsafe())))
            return fail(err, cap, "bad JSON: NUL character in a string");
        return 0;
    case element_type::UINT64:
        return fail(err, cap, "bad JSON: integer too big for 64-bit signed");
    default:
        return 0;
    }
}

/* Fetch the non-negative integer field `name` of `o` into *out, or describe
 * what is wrong with it. */
int get_count(simdjson::dom::object o, const char *name, uint64_t *out, char *err, size_t cap)
{
    simdjson::dom::element v;
    if (o.at_key(name).get(v))
        return fail(err, cap, "missing field \"%s\"", name);
    if (!v.is_int64())
        return fail(err, cap, "field \"%s\" must be an integer", name);
    int64_t x = v.get_int64().value_unsafe();
    if (x < 0)
        return fail(err, cap, "negative %s (%lld)", name, (long long)x);
    *out = (uint64_t)x;
    return 0;
}

/* Make room for one more request and `n_ids` more ids.  Returns -1 when
 * memory runs out (the trace is unchanged but for capacity). */
int reserve(kvpt_trace *t, size_t n_ids)
{
    if (t->n_requests == t->req_cap) {
        size_t cap = t->req_cap ? 2 * t->req_cap : 1024;
        uint64_t *off = (uint64_t *)std::realloc(t->offset, (cap + 1) * sizeof *off);
        if (!off)
            return -1;
        if (!t->offset)
            off[0] = 0;
        t->offset = off;
        uint64_t *inl = (uint64_t *)std::realloc(t->input_length, cap * sizeof *inl);
        if (!inl)
            return -1;
        t->input_length = inl;
        uint64_t *outl = (uint64_t *)std::realloc(t->output_length, cap * sizeof *outl);
        if (!outl)
            return -1;
        t->output_length = outl;
        t->req_cap = cap;
    }
    size_t need = (size_t)t->total_blocks + n_ids;
    if (need > t->ids_cap) {
        size_t cap = t->ids_cap ? t->ids_cap : 16384;
        while (cap < need)
            cap *= 2;
        uint64_t *ids = (uint64_t *)std::realloc(t->ids, cap * sizeof *ids);
        if (!ids)
            return -1;
        t->ids = ids;
        t->ids_cap = cap;
    }
    return 0;
}

/* Check the fields of a parsed line and append its request to *t; on error
 * *t's requests and totals are unchanged. */
int add_request(kvpt_trace *t, simdjson::dom::object o, char *err, size_t cap)
{
    uint64_t timestamp, input_length, output_length;
    if (get_count(o, "timestamp", &timestamp, err, cap) ||
        get_count(o, "input_length", &input_length, err, cap) ||
        get_count(o, "output_length", &output_length, err, cap))
        return -1;
    simdjson::dom::element h;
    if (o.at_key("hash_ids").get(h))
        return fail(err, cap, "missing field \"hash_ids\"");
    if (!h.is_array())
        return fail(err, cap, "field \"hash_ids\" must be an array");
    simdjson::dom::array hashes = h.get_array().value_unsafe();
    size_t n = hashes.size();
    if (n == 0)
        return fail(err, cap, "empty hash_ids");
    if (reserve(t, n))
        return fail(err, cap, "out of memory");
    uint64_t *dst = t->ids + t->total_blocks;
    size_t i = 0;
    for (simdjson::dom::element v : hashes) {
        if (!v.is_int64() || v.get_int64().value_unsafe() < 0)
            return fail(err, cap, "hash_ids[%zu] must be a non-negative integer", i);
        dst[i++] = (uint64_t)v.get_int64().value_unsafe();
    }
    uint64_t blocks = input_length / KVPT_TRACE_BLOCK_TOKENS +
                      (input_length % KVPT_TRACE_BLOCK_TOKENS != 0);
    if (blocks != n)
        return fail(err, cap,
                    "input_length %llu needs %llu hash ids (one per %u tokens), hash_ids has %zu",
                    (unsigned long long)input_length, (unsigned long long)blocks,
                    KVPT_TRACE_BLOCK_TOKENS, n);
    if (t->total_input > UINT64_MAX - input_length)
        return fail(err, cap, "the total input_length of the trace overflows 64 bits");
    t->input_length[t->n_requests] = input_length;
    t->output_length[t->n_requests] = output_length;
    t->total_input += input_length;
    t->total_blocks += n;
    if (n > t->max_blocks)
        t->max_blocks = n;
    t->n_requests++;
    t->offset[t->n_requests] = t->total_blocks;
    return 0;
}

/* Parse, check and append (see trace.h); exceptions stop here. */
int add_line(kvpt_trace *t, const char *line, size_t len, char *err, size_t cap)
{
    if (len > KVPT_TRACE_MAX_LINE)
        return fail(err, cap, "line longer than %u bytes", KVPT_TRACE_MAX_LINE);
    if (!t->json) {
        t->json = new (std::nothrow) kvpt_json;
        if (!t->json)
            return fail(err, cap, "out of memory");
    }
    kvpt_json *j = t->json;
    if (j->line.size() < len + simdjson::SIMDJSON_PADDING)
        j->line.resize(len + simdjson::SIMDJSON_PADDING);
    std::memcpy(j->line.data(), line, len);
    simdjson::dom::element doc;
    auto rc = simdjson::SUCCESS;
    /* parse() grows the parser to a longer line itself, keeping the depth */
    if (j->parser.max_depth() != KVPT_JSON_DEPTH)
        rc = j->parser.allocate(std::max(len, (size_t)1 << 16), KVPT_JSON_DEPTH);
    if (rc == simdjson::SUCCESS)
        rc = j->parser.parse(j->line.data(), len, false).get(doc);
    if (rc == simdjson::MEMALLOC)
        return fail(err, cap, "out of memory");
    if (rc != simdjson::SUCCESS)
        return fail(err, cap, "bad JSON: %s", simdjson::error_message(rc));
    if (!doc.is_object() && !doc.is_array())
        return fail(err, cap, "bad JSON: an object or an array expected");
    if (check_value(j, doc, err, cap))
        return -1;
    if (!doc.is_object())
        return fail(err, cap, "not a JSON object");
    return add_request(t, doc.get_object().value_unsafe(), err, cap);
}

} // namespace

extern "C" int kvpt_trace_add_line(kvpt_trace *t, const char *line, size_t len, char *err,
                                   size_t errcap)
{
    try {
        return add_line(t, line, len, err, errcap);
    } catch (...) { /* std::bad_alloc from a vector */
        return fail(err, errcap, "out of memory");
    }
}

extern "C" void kvpt_trace_json_free(kvpt_json *j)
{
    delete j;
}
