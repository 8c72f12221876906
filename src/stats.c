/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats.c — the statistics calls and their text renderings.
 *
 * What it owns: the public stats calls (get, reset, snapshot, history), the
 * rate counters' reset, and the Prometheus and JSON writers.  Assembling a
 * kvp_stats and the history ring are history.c's, which guard.c also runs
 * after every call when per-call history is on.
 *
 * Both renderers walk one table of metrics, so a counter added to the table
 * appears in both, with the same name.  The table's last rows repeat three
 * fields under vLLM's dashboard names; they appear in the Prometheus text
 * only, since the JSON object has one key per kvp_stats field.  Labels are
 * the caller's, checked before anything is written and escaped as the text
 * format requires; "group" and "tier" stay free for samples split by those
 * dimensions.
 */
#include "guard.h"
#include "history.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

kvp_status kvp_stats_get(kvp_pool *pool, kvp_stats *out)
{
    if (!pool || !out)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    kvp__stats_fill(pool, out);
    kvp__leave(pool, false);
    return KVP_OK;
}

kvp_status kvp_stats_reset(kvp_pool *pool)
{
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    memset(&pool->ctr, 0, sizeof pool->ctr);
    pool->g.peak = pool->g.in_use;
    kvp__leave(pool, false);
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* History                                                                   */
/* ------------------------------------------------------------------------ */

kvp_status kvp_stats_snapshot(kvp_pool *pool)
{
    if (!pool || !pool->cfg.history_len)
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    kvp__history_push(pool);
    kvp__leave(pool, false);
    return KVP_OK;
}

kvp_status kvp_stats_history(kvp_pool *pool, kvp_stats *out, size_t cap, size_t *n_out)
{
    if (!pool || !n_out || (!out && cap))
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    *n_out = pool->hist.count;
    if (cap < pool->hist.count)
        rc = KVP_ESPACE;
    else
        for (uint32_t i = 0; i < pool->hist.count; i++)
            out[i] = pool->hist.ring[(pool->hist.head + i) % pool->cfg.history_len];
    kvp__leave(pool, false);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Renderers                                                                 */
/* ------------------------------------------------------------------------ */

enum { GAUGE, COUNTER, RATIO };

/* prom_only: a family under a vLLM dashboard name, rendered in the
 * Prometheus text only (the JSON object keeps one key per kvp_stats field). */
static const struct metric {
    const char *name;
    int kind;
    size_t off;
    bool prom_only;
    const char *help;
} metrics[] = {
#define M(field, kind, help) {#field, kind, offsetof(kvp_stats, field), false, help}
#define V(name, field, kind, help) {name, kind, offsetof(kvp_stats, field), true, help}
    M(blocks, GAUGE, "Blocks managed by the pool (not retired)."),
    M(in_use, GAUGE, "Blocks holding at least one reference."),
    M(free, GAUGE, "Free blocks, vacant and cached."),
    M(vacant, GAUGE, "Free blocks without content."),
    M(cached, GAUGE, "Free blocks whose content can still be claimed."),
    M(shared, GAUGE, "Blocks with two or more references."),
    M(indexed, GAUGE, "Entries in the content index."),
    M(fragmented, GAUGE, "Blocks in use that are partly filled."),
    M(owners, GAUGE, "Active owners."),
    M(peak_in_use, GAUGE, "High-water mark of blocks in use."),
    M(alloc_calls, COUNTER, "Successful allocation calls."),
    M(blocks_allocated, COUNTER, "Blocks handed out."),
    M(free_calls, COUNTER, "Successful free calls."),
    M(blocks_freed, COUNTER, "References dropped by free calls."),
    M(reused, COUNTER, "Blocks handed out that had been handed out before."),
    M(exhausted, COUNTER, "Allocation attempts refused for lack of blocks."),
    M(grown, COUNTER, "Blocks added by growth on exhaustion."),
    M(extended, COUNTER, "Blocks added by explicit extension."),
    M(retired, COUNTER, "Blocks retired by shrink or retire-top."),
    M(relocated, COUNTER, "Blocks moved to a new id by retire-top."),
    M(evictions, COUNTER, "Hashes evicted from the content index."),
    M(prefix_queries, COUNTER, "Full prompt blocks looked up at admission."),
    M(prefix_hits, COUNTER, "Prompt blocks served from the prefix cache."),
    M(prefix_tokens_queried, COUNTER, "Prompt tokens in full blocks looked up at admission."),
    M(prefix_tokens_hit, COUNTER, "Prompt tokens served from the prefix cache."),
    M(admitted_tokens, COUNTER, "Prompt tokens admitted, cached or not."),
    M(cow_copies, COUNTER, "Copy-on-write block copies."),
    M(tokens_in_use, GAUGE, "Tokens held in blocks in use (sum of fill levels)."),
    M(events_dropped, COUNTER, "KV-cache events lost to a full event queue."),
    M(fragmentation, RATIO, "Fraction of managed blocks in use and partly filled."),
    M(usage, RATIO, "Fraction of managed blocks in use."),
    V("kv_cache_usage_perc", usage, RATIO, "KV-cache usage, 1 means 100 percent (in_use / blocks)."),
    V("prefix_cache_queries", admitted_tokens, COUNTER,
      "Prefix cache queries, in prompt tokens admitted."),
    V("prefix_cache_hits", prefix_tokens_hit, COUNTER,
      "Prefix cache hits, in prompt tokens served from the cache."),
#undef V
#undef M
};

/* A writer that counts what it would write, and writes only while it fits:
 * one pass gives both the text and the size needed. */
typedef struct writer {
    char *buf;
    size_t cap, len;
} writer;

/* Append printf-formatted text, or only count it once the buffer is full. */
static void put(writer *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

/* Append one metric's value, read from the kvp_stats at its offset. */
static void put_value(writer *o, const kvp_stats *st, const struct metric *m)
{
    const char *field = (const char *)st + m->off;
    if (m->kind == RATIO) {
        double v;
        memcpy(&v, field, sizeof v);
        put(o, "%.6f", v);
    } else {
        uint64_t v;
        memcpy(&v, field, sizeof v);
        put(o, "%llu", (unsigned long long)v);
    }
}

/* A name made of letters, digits, '_' and the characters in `extra`, not
 * starting with a digit. */
static bool valid_name(const char *s, const char *extra)
{
    if (!*s || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || (*s && strchr(extra, *s))))
            return false;
    return true;
}

/* A caller's label set: valid names, not reserved by Prometheus ("__") or
 * for later dimensions of the exposition ("group", "tier"), none repeated. */
static bool valid_labels(const kvp_label *labels, size_t n)
{
    if (n && !labels)
        return false;
    for (size_t i = 0; i < n; i++) {
        const char *name = labels[i].name;
        if (!name || !labels[i].value || !valid_name(name, "") || !strncmp(name, "__", 2) ||
            !strcmp(name, "group") || !strcmp(name, "tier"))
            return false;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(name, labels[j].name))
                return false;
    }
    return true;
}

/* Append the label set `{a="x",b="y"}` (nothing without labels), values
 * escaped as the text format requires. */
static void put_labels(writer *o, const kvp_label *labels, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        put(o, "%s%s=\"", i ? "," : "{", labels[i].name);
        for (const char *v = labels[i].value; *v; v++) {
            size_t run = strcspn(v, "\\\"\n");
            put(o, "%.*s", (int)run, v);
            v += run;
            if (!*v)
                break;
            put(o, "\\%c", *v == '\n' ? 'n' : *v);
        }
        put(o, "\"");
    }
    if (n)
        put(o, "}");
}

/* Write the metrics as Prometheus text (opts set) or JSON (opts NULL). */
static void write_metrics(writer *o, const kvp_stats *st, const kvp_prometheus_opts *opts)
{
    size_t n = sizeof metrics / sizeof metrics[0];
    if (!opts) {
        put(o, "{");
        for (size_t i = 0; i < n; i++)
            if (!metrics[i].prom_only) {
                put(o, "%s\"%s\":", i ? "," : "", metrics[i].name);
                put_value(o, st, &metrics[i]);
            }
        put(o, "}");
        return;
    }
    size_t plen = strlen(opts->prefix);
    const char *sep = opts->prefix[plen - 1] == ':' ? "" : "_";
    for (size_t i = 0; i < n; i++) {
        const struct metric *m = &metrics[i];
        const char *suffix = m->kind == COUNTER ? "_total" : "";
        const char *type = m->kind == COUNTER ? "counter" : "gauge";
        put(o, "# HELP %s%s%s%s %s\n", opts->prefix, sep, m->name, suffix, m->help);
        put(o, "# TYPE %s%s%s%s %s\n", opts->prefix, sep, m->name, suffix, type);
        put(o, "%s%s%s%s", opts->prefix, sep, m->name, suffix);
        put_labels(o, opts->labels, opts->n_labels);
        put(o, " ");
        put_value(o, st, m);
        put(o, "\n");
    }
}

/* Measure first, write only if it fits: a too-small buffer stays as it was. */
static kvp_status render(kvp_pool *pool, const kvp_prometheus_opts *opts, char *buf, size_t cap,
                         size_t *needed)
{
    if (!pool || (!buf && cap) ||
        (opts && (!valid_name(opts->prefix, ":") || !valid_labels(opts->labels, opts->n_labels))))
        return KVP_EINVAL;
    kvp_status rc = kvp__enter(pool);
    if (rc)
        return rc;
    kvp_stats st;
    kvp__stats_fill(pool, &st);
    kvp__leave(pool, false);

    writer measure = {NULL, 0, 0};
    write_metrics(&measure, &st, opts);
    if (needed)
        *needed = measure.len;
    if (measure.len >= cap)
        return KVP_ESPACE;
    writer o = {buf, cap, 0};
    write_metrics(&o, &st, opts);
    return KVP_OK;
}

kvp_status kvp_stats_prometheus_opts(kvp_pool *pool, const kvp_prometheus_opts *opts,
                                     char *buf, size_t cap, size_t *needed)
{
    kvp_prometheus_opts o = {"kvpool", NULL, 0};
    if (opts) {
        o = *opts;
        if (!o.prefix)
            o.prefix = "kvpool";
    }
    return render(pool, &o, buf, cap, needed);
}

kvp_status kvp_stats_prometheus(kvp_pool *pool, const char *prefix, char *buf, size_t cap,
                                size_t *needed)
{
    kvp_prometheus_opts o = {prefix, NULL, 0};
    return kvp_stats_prometheus_opts(pool, &o, buf, cap, needed);
}

kvp_status kvp_stats_json(kvp_pool *pool, char *buf, size_t cap, size_t *needed)
{
    return render(pool, NULL, buf, cap, needed);
}
