/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model.c — the reference model of a kvpool pool (see model.h).
 *
 * Moved out of tests/test_model.c so that test_model and the differential
 * fuzzer (fuzz/fuzz_pool.c) share one model; the pool part is unchanged
 * apart from the mdl_ prefix.  The sequence part at the end models what a
 * sequence does to the pool: anonymous references, blocks taken in reuse
 * order, fill levels, publishing of full blocks, prefix claims at admission,
 * copy-on-write, tail-first release.  It is written from kvpool.h
 * ("Sequences").
 */
#include "model.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

int mdl_mimic;

static void il_ins(ilist *l, uint32_t pos, kvp_block b)
{
    memmove(&l->v[pos + 1], &l->v[pos], (l->n - pos) * sizeof l->v[0]);
    l->v[pos] = b;
    l->n++;
}

static void il_del_at(ilist *l, uint32_t pos)
{
    memmove(&l->v[pos], &l->v[pos + 1], (l->n - pos - 1) * sizeof l->v[0]);
    l->n--;
}

static int il_find(const ilist *l, kvp_block b)
{
    for (uint32_t i = 0; i < l->n; i++)
        if (l->v[i] == b)
            return (int)i;
    return -1;
}

static void il_push(ilist *l, kvp_block b)
{
    il_ins(l, l->n, b);
}

static void il_ins_sorted(ilist *l, kvp_block b)
{
    uint32_t i = 0;
    while (i < l->n && l->v[i] < b)
        i++;
    il_ins(l, i, b);
}

uint32_t mdl_refcnt(const mblk *k)
{
    uint32_t n = k->anon + k->seqref;
    for (int i = 0; i < k->nh; i++)
        n += k->h_cnt[i];
    return n;
}

uint32_t mdl_held(const mblk *k, int oi)
{
    if (oi < 0)
        return k->anon;
    for (int i = 0; i < k->nh; i++)
        if (k->h_own[i] == oi)
            return k->h_cnt[i];
    return 0;
}

/* oi: an owner index, -1 for an anonymous reference, MDL_SEQ for a
 * sequence's (kept apart from anonymous ones, as the library does). */
static void holder_add(mblk *k, int oi)
{
    if (oi < 0) {
        if (oi == MDL_SEQ)
            k->seqref++;
        else
            k->anon++;
        return;
    }

    for (int i = 0; i < k->nh; i++)
        if (k->h_own[i] == oi) {
            k->h_cnt[i]++;
            k->h_multi[i] = 1;
            return;
        }
    k->h_own[k->nh] = oi;
    k->h_cnt[k->nh] = 1;
    k->h_multi[k->nh] = 0;
    k->nh++;
}

static void holder_drop(mblk *k, int oi)
{
    if (oi < 0) {
        if (oi == MDL_SEQ)
            k->seqref--;
        else
            k->anon--;
        return;
    }

    for (int i = 0; i < k->nh; i++)
        if (k->h_own[i] == oi) {
            if (--k->h_cnt[i] == 0) {
                for (int j = i; j + 1 < k->nh; j++) {
                    k->h_own[j] = k->h_own[j + 1];
                    k->h_cnt[j] = k->h_cnt[j + 1];
                    k->h_multi[j] = k->h_multi[j + 1];
                }
                k->nh--;
            }
            return;
        }
}

int mdl_is_free(const mblk *k)
{
    return k->state == KVP_BLOCK_VACANT || k->state == KVP_BLOCK_CACHED;
}

int mdl_is_managed(const mblk *k)
{
    return mdl_is_free(k) || k->state == KVP_BLOCK_IN_USE;
}

/* Free-list index for a stream argument, -1 when the stream is refused. */
int mdl_list(const model *m, int stream)
{
    if (!m->c.sep)
        return stream >= 0 && stream <= 2 ? 0 : -1;
    return stream == KVP_STREAM_K ? 0 : stream == KVP_STREAM_V ? 1 : -1;
}

kvp_stream mdl_list_stream(const model *m, int L)
{
    if (!m->c.sep)
        return KVP_STREAM_SHARED;
    return L == 0 ? KVP_STREAM_K : KVP_STREAM_V;
}

uint32_t mdl_managed(const model *m)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->top; i++)
        n += mdl_is_managed(&m->b[i]);
    return n;
}

static uint32_t cap_blocks(const model *m)
{
    return m->c.maxb ? m->c.maxb : KVP_MAX_BLOCKS;
}

uint32_t mdl_n_state(const model *m, int L, int state)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->top; i++)
        n += m->b[i].state == state && m->b[i].list == L;
    return n;
}

uint32_t mdl_n_free(const model *m, int L)
{
    return mdl_n_state(m, L, KVP_BLOCK_VACANT) + mdl_n_state(m, L, KVP_BLOCK_CACHED);
}

static void record_ev(model *m, int hash, kvp_block b)
{
    if (m->nev < MAXEV) {
        m->ev_hash[m->nev] = hash;
        m->ev_block[m->nev] = b;
    }
    m->nev++;
}

/* A block's policy state when it holds no content yet. */
static void reset_policy(mblk *k)
{
    k->prio = KVP_PRIORITY_NORMAL;
    k->hit = k->prot = k->freq = 0;
}

/* Drop b's index entry: one eviction (callback, counted).  SLRU's ghost list
 * remembers it: kvpool.h, "its hash was among the pool's last num_blocks
 * evicted hashes". */
static void evict_entry(model *m, kvp_block b)
{
    if (m->c.policy == KVP_POLICY_SLRU) {
        uint32_t cap = m->c.nblocks ? m->c.nblocks : 1;
        if (m->ghost_n == cap) {
            memmove(&m->ghost[0], &m->ghost[1], (cap - 1) * sizeof m->ghost[0]);
            m->ghost_n--;
        }
        m->ghost[m->ghost_n].list = m->b[b].list;
        m->ghost[m->ghost_n].hash = m->b[b].hash;
        m->ghost[m->ghost_n].alive = 1;
        m->ghost_n++;
    }
    record_ev(m, m->b[b].hash, b);
    m->k.evictions++;
    m->b[b].hash = -1;
}

/* Take free block b out of every free structure. */
static void free_remove(model *m, kvp_block b)
{
    int L = m->b[b].list;
    if (mdl_mimic && m->c.reuse == KVP_REUSE_LIFO) {
        /* deviation B2: taking a never-used block from the middle of the
         * never-used range turns all of them into ordinary stack entries
         * below the freed ones; blocks that later lose their content go
         * below those, i.e. after never-used blocks, which the header says
         * come "after every freed vacant block". */
        int pos = il_find(&m->fresh[L], b);
        if (pos > 0 && (uint32_t)pos + 1 < m->fresh[L].n) {
            for (uint32_t i = 0; i < m->fresh[L].n; i++)
                il_push(&m->stk[L], m->fresh[L].v[i]);
            m->fresh[L].n = 0;
        }
    }
    ilist *ls[4] = {&m->stk[L], &m->fresh[L], &m->cac[L], &m->fq[L]};
    for (int i = 0; i < 4; i++) {
        int pos = il_find(ls[i], b);
        if (pos >= 0)
            il_del_at(ls[i], (uint32_t)pos);
    }
}

/* The cached block of list L evicted next (kvp_policy): the lowest
 * priority, then probationary before protected, then the one that joined
 * its group first; FIFO: the first cached block in the queue. */
kvp_block mdl_victim(const model *m, int L)
{
    if (m->c.reuse == KVP_REUSE_FIFO) {
        for (uint32_t i = 0; i < m->fq[L].n; i++)
            if (m->b[m->fq[L].v[i]].state == KVP_BLOCK_CACHED)
                return m->fq[L].v[i];
        return KVP_NO_BLOCK;
    }
    kvp_block best = KVP_NO_BLOCK;
    for (uint32_t i = 0; i < m->cac[L].n; i++) {
        const mblk *k = &m->b[m->cac[L].v[i]], *o = best == KVP_NO_BLOCK ? NULL : &m->b[best];
        if (!o || k->prio < o->prio || (k->prio == o->prio && k->prot < o->prot) ||
            (k->prio == o->prio && k->prot == o->prot && k->stamp < o->stamp))
            best = m->cac[L].v[i];
    }
    return best;
}

/* The block the next allocation from list L takes, or KVP_NO_BLOCK. */
static kvp_block next_pick(const model *m, int L)
{
    if (m->c.reuse == KVP_REUSE_FIFO)
        return m->fq[L].n ? m->fq[L].v[0] : KVP_NO_BLOCK;
    if (m->stk[L].n)
        return m->stk[L].v[0];
    if (m->fresh[L].n)
        return m->fresh[L].v[0];
    return mdl_victim(m, L);
}

/* LFU (kvpool.h): cached block b counts a claim since it was last freed
 * (up to class 2) and joins its class as if freed now; then, from its class
 * down to class 1, while a class holds more than protected_percent / 2 of
 * the list's managed blocks, its oldest goes one class down, as if freed
 * now. */
static void lfu_insert(model *m, kvp_block b, uint32_t managed)
{
    mblk *k = &m->b[b];
    if (k->hit && k->freq < 2)
        k->freq++;
    k->hit = 0;
    k->prot = k->freq;
    k->stamp = ++m->clock;
    for (int c = k->freq; c >= 1; c--)
        for (;;) {
            uint32_t n = 0;
            kvp_block oldest = KVP_NO_BLOCK;
            for (uint32_t i = 0; i < m->cac[k->list].n; i++) {
                const mblk *o = &m->b[m->cac[k->list].v[i]];
                if (o->prio != k->prio || o->freq != c)
                    continue;
                n++;
                if (oldest == KVP_NO_BLOCK || o->stamp < m->b[oldest].stamp)
                    oldest = m->cac[k->list].v[i];
            }
            if ((uint64_t)n * 200 <= (uint64_t)managed * m->c.protected_percent)
                break;
            m->b[oldest].freq = m->b[oldest].prot = c - 1;
            m->b[oldest].stamp = ++m->clock;
        }
}

/* Cached block b joins its priority's eviction order as if freed now:
 * protected under SLRU when it was hit since published; while the
 * priority's protected group is above protected_percent of the list's
 * managed blocks, its oldest goes back to the probationary group, as if
 * freed now.  LFU: lfu_insert. */
static void policy_insert(model *m, kvp_block b)
{
    mblk *k = &m->b[b];
    uint32_t managed = 0;
    for (uint32_t i = 0; i < m->top; i++)
        managed += mdl_is_managed(&m->b[i]) && m->b[i].list == k->list;
    if (m->c.policy == KVP_POLICY_LFU) {
        lfu_insert(m, b, managed);
        return;
    }
    k->prot = m->c.policy == KVP_POLICY_SLRU && k->hit;
    k->stamp = ++m->clock;
    if (!k->prot)
        return;
    for (;;) {
        uint32_t prot = 0;
        kvp_block oldest = KVP_NO_BLOCK;
        for (uint32_t i = 0; i < m->cac[k->list].n; i++) {
            const mblk *o = &m->b[m->cac[k->list].v[i]];
            if (o->prio != k->prio || !o->prot)
                continue;
            prot++;
            if (oldest == KVP_NO_BLOCK || o->stamp < m->b[oldest].stamp)
                oldest = m->cac[k->list].v[i];
        }
        if ((uint64_t)prot * 100 <= (uint64_t)managed * m->c.protected_percent)
            return;
        m->b[oldest].prot = 0;
        m->b[oldest].stamp = ++m->clock;
    }
}

/* Content id h was just indexed on block b: under SLRU a hash still in the
 * ghost list comes back as if hit, and leaves the list. */
static void index_entry(model *m, kvp_block b, int h)
{
    mblk *k = &m->b[b];
    k->hash = h;
    k->seq = ++m->seq;
    for (uint32_t i = 0; i < m->ghost_n; i++)
        if (m->ghost[i].alive && m->ghost[i].list == k->list && m->ghost[i].hash == h) {
            m->ghost[i].alive = 0;
            k->hit = 1;
        }
}

/* Blocks that just became free (state already set to vacant or cached) join
 * the free blocks "in the order given: the first given is the first reused
 * (and, when cached, the first evicted)". */
static void join_free(model *m, const kvp_block *bl, uint32_t n)
{
    for (int L = 0; L < m->nl; L++) {
        uint32_t pos = 0;
        for (uint32_t i = 0; i < n; i++) {
            kvp_block b = bl[i];
            if (m->b[b].list != L)
                continue;
            if (m->b[b].state == KVP_BLOCK_VACANT)
                reset_policy(&m->b[b]);
            if (m->c.reuse == KVP_REUSE_FIFO) {
                il_push(&m->fq[L], b);
            } else if (m->b[b].state == KVP_BLOCK_CACHED) {
                il_push(&m->cac[L], b);
                policy_insert(m, b);
            } else if (m->c.reuse == KVP_REUSE_LIFO) {
                il_ins(&m->stk[L], pos++, b);
            } else {
                il_ins_sorted(&m->stk[L], b);
            }
        }
    }
}

/* A cached free block loses its content and becomes vacant.  FIFO: keeps its
 * place in the one queue.  LOWEST: joins the vacant blocks by id.  LIFO:
 * header is silent on where; the implementation documents "bottom of the
 * vacant stack, reused after the blocks vacant before it" (but still before
 * never-used blocks, which come after every freed vacant block). */
static void cached_to_vacant(model *m, kvp_block b)
{
    int L = m->b[b].list;
    m->b[b].state = KVP_BLOCK_VACANT;
    reset_policy(&m->b[b]);
    if (m->c.reuse == KVP_REUSE_FIFO)
        return;
    int pos = il_find(&m->cac[L], b);
    il_del_at(&m->cac[L], (uint32_t)pos);
    if (m->c.reuse == KVP_REUSE_LIFO)
        il_push(&m->stk[L], b);
    else
        il_ins_sorted(&m->stk[L], b);
}

static void owner_activate(model *m, int oi)
{
    if (oi >= 0 && !m->o[oi].active) {
        m->o[oi].active = 1;
        m->o[oi].registered = 0;
        m->o[oi].n = 0;
    }
}

static void owner_ref_add(model *m, int oi, kvp_block b)
{
    if (oi < 0)
        return;
    owner_activate(m, oi);
    m->o[oi].refs[m->o[oi].n++] = b;
}

/* Drop one of oi's references on b from its list.  Which occurrence goes when
 * the owner holds several on b is not fixed by the header; the model drops
 * the oldest and re-syncs with kvp_owner_blocks (see cmp_owner). */
static void owner_ref_drop(model *m, int oi, kvp_block b)
{
    if (oi < 0)
        return;
    mown *o = &m->o[oi];
    for (uint32_t i = 0; i < o->n; i++)
        if (o->refs[i] == b) {
            memmove(&o->refs[i], &o->refs[i + 1], (o->n - i - 1) * sizeof o->refs[0]);
            o->n--;
            return;
        }
}

/* Make b (free) a block in use with one reference for oi. */
static void hand_out(model *m, kvp_block b, int oi, unsigned format, int format_known)
{
    mblk *k = &m->b[b];
    if (k->hash >= 0)
        evict_entry(m, b);
    reset_policy(k);
    if (k->ever)
        m->k.reused++;
    k->ever = 1;
    k->state = KVP_BLOCK_IN_USE;
    k->fill = 0;
    k->format = format;
    k->format_known = format_known;
    holder_add(k, oi);
    owner_ref_add(m, oi, b);
}

static void init_block(model *m, kvp_block b, int L)
{
    mblk *k = &m->b[b];
    int reborn = k->state == KVP_BLOCK_RETIRED || k->state == M_GONE || k->reborn;
    memset(k, 0, sizeof *k);
    k->state = KVP_BLOCK_VACANT;
    k->list = L;
    k->hash = -1;
    k->reborn = reborn;
    reset_policy(k);
}

/* Add k vacant blocks to list L: retired ids first (lowest first), then above
 * the top; they join "as if freed now, in id order". */
static void grow(model *m, int L, uint32_t k)
{
    kvp_block ids[MB];
    uint32_t n = 0;
    for (uint32_t i = 0; i < m->top && n < k; i++)
        if (m->b[i].state == KVP_BLOCK_RETIRED || m->b[i].state == M_GONE)
            ids[n++] = i;
    while (n < k)
        ids[n++] = m->top++;
    for (uint32_t i = 0; i < n; i++)
        init_block(m, ids[i], L);
    join_free(m, ids, n);
}

void mdl_init(model *m, const mcfg *c)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    m->nl = c->sep ? 2 : 1;
    m->top = c->nblocks;
    for (uint32_t i = 0; i < MB; i++) {
        m->b[i].state = M_NONE;
        m->b[i].hash = -1;
        reset_policy(&m->b[i]);
    }
    uint32_t nk = c->sep ? (c->nblocks + 1) / 2 : c->nblocks;
    for (uint32_t i = 0; i < c->nblocks; i++) {
        mblk *k = &m->b[i];
        k->state = KVP_BLOCK_VACANT;
        k->list = i < nk ? 0 : 1;
        if (i == 0 && c->nullb) {
            k->state = KVP_BLOCK_IN_USE;
            k->is_null = 1;
            continue;
        }
        if (c->reuse == KVP_REUSE_FIFO)
            il_push(&m->fq[k->list], i);
        else if (c->reuse == KVP_REUSE_LIFO)
            il_push(&m->fresh[k->list], i);
        else
            il_push(&m->stk[k->list], i);
    }
    m->k.peak = c->nullb ? 1 : 0;
}

/* ---- gauges ---- */

kvp_stats mdl_gauges(const model *m)
{
    kvp_stats s;
    memset(&s, 0, sizeof s);
    for (uint32_t i = 0; i < m->top; i++) {
        const mblk *k = &m->b[i];
        if (!mdl_is_managed(k))
            continue;
        s.blocks++;
        if (k->state == KVP_BLOCK_IN_USE) {
            s.in_use++;
            if (!k->is_null && mdl_refcnt(k) >= 2)
                s.shared++;
            if (!k->is_null && k->fill > 0 && k->fill < m->c.bs)
                s.fragmented++;
        }
        s.vacant += k->state == KVP_BLOCK_VACANT;
        s.cached += k->state == KVP_BLOCK_CACHED;
        s.indexed += k->hash >= 0;
    }
    s.free = s.vacant + s.cached;
    for (int i = 0; i < NOWN; i++)
        s.owners += m->o[i].active;
    return s;
}

/* Every counter kvp_stats_get should report, from the model: the gauges
 * above plus the rate counters the model keeps (not the two ratios). */
static kvp_stats mdl_expected(const model *m)
{
    kvp_stats e = mdl_gauges(m);
    for (uint32_t i = 0; i < m->top; i++)
        if (m->b[i].state == KVP_BLOCK_IN_USE)
            e.tokens_in_use += m->b[i].fill;
    e.peak_in_use = m->k.peak;
    e.alloc_calls = m->k.alloc_calls;
    e.blocks_allocated = m->k.blocks_allocated;
    e.free_calls = m->k.free_calls;
    e.blocks_freed = m->k.blocks_freed;
    e.exhausted = m->k.exhausted;
    e.grown = m->k.grown;
    e.extended = m->k.extended;
    e.retired = m->k.retired;
    e.relocated = m->k.relocated;
    e.evictions = m->k.evictions;
    e.prefix_queries = m->k.prefix_queries;
    e.prefix_hits = m->k.prefix_hits;
    e.prefix_tokens_queried = m->k.prefix_queries * m->c.bs;
    e.prefix_tokens_hit = m->k.prefix_hits * m->c.bs;
    e.cow_copies = m->k.cow_copies;
    e.reused = m->k.reused;
    return e;
}

/* Compare `got` with the model's expected counters; `bad` hears of each
 * field that differs (name, expected, got).  Returns the number of fields
 * that differ.  One table serves the model test and the fuzzer.  Also moves
 * the model's peak up to the blocks in use now (mdl_note_peak, which steps
 * not followed by a comparison call themselves), and judges `reused` only
 * while no id was added again after retirement (whether such an id "had
 * been handed out" is open; the model then takes the library's count). */
void mdl_note_peak(model *m)
{
    kvp_stats in_use = mdl_gauges(m);
    if (in_use.in_use > m->k.peak)
        m->k.peak = in_use.in_use;
}

int mdl_stats_diff(model *m, const kvp_stats *got,
                   void (*bad)(void *user, const char *field, uint64_t exp, uint64_t got),
                   void *user)
{
    mdl_note_peak(m);
    int reborn = 0;
    for (uint32_t i = 0; i < m->top; i++)
        reborn |= m->b[i].reborn;
    if (reborn)
        m->k.reused = got->reused;
    static const struct {
        const char *name;
        size_t off;
    } fields[] = {
#define F(f) {"stats." #f, offsetof(kvp_stats, f)}
        F(blocks), F(in_use), F(free), F(vacant), F(cached), F(shared), F(indexed),
        F(fragmented), F(owners), F(tokens_in_use), F(peak_in_use), F(alloc_calls),
        F(blocks_allocated), F(free_calls), F(blocks_freed), F(exhausted), F(grown),
        F(extended), F(retired), F(relocated), F(evictions), F(prefix_queries),
        F(prefix_hits), F(prefix_tokens_queried), F(prefix_tokens_hit), F(cow_copies),
        F(reused),
#undef F
    };
    kvp_stats e = mdl_expected(m);
    int n = 0;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        uint64_t ev, gv;
        memcpy(&ev, (const char *)&e + fields[i].off, sizeof ev);
        memcpy(&gv, (const char *)got + fields[i].off, sizeof gv);
        if (ev != gv) {
            bad(user, fields[i].name, ev, gv);
            n++;
        }
    }
    return n;
}

/* ---- model operations: return the expected status; change the model only
 * on success ---- */

int mdl_bad_id(const model *m, kvp_block id)
{
    return id >= m->top || m->b[id].state == KVP_BLOCK_RETIRED ||
           m->b[id].state == M_GONE || m->b[id].state == M_NONE;
}

/* The status of a call naming block `id`, as far as the id alone decides it:
 * KVP_EINVAL for the null block, KVP_ERANGE for an id the pool does not
 * manage, else KVP_OK. */
static kvp_status id_status(const model *m, kvp_block id)
{
    if (id < m->top && m->b[id].is_null)
        return KVP_EINVAL;
    return mdl_bad_id(m, id) ? KVP_ERANGE : KVP_OK;
}

kvp_status mdl_alloc(model *m, int stream, uint64_t tokens, int oi, unsigned fmt,
                          size_t cap, int take, kvp_block *ids, size_t *n_out)
{
    int L = mdl_list(m, stream);
    if (tokens == 0 || L < 0 || fmt > 255)
        return KVP_EINVAL;
    uint64_t cnt = tokens / m->c.bs + (tokens % m->c.bs != 0);
    if (cnt > KVP_MAX_BLOCKS)
        return KVP_EINVAL;
    if (cnt > cap) {
        *n_out = (size_t)cnt;
        return KVP_ESPACE;
    }
    uint32_t f = mdl_n_free(m, L);
    if (cnt > f) {
        uint32_t need = (uint32_t)cnt - f;
        if (!m->c.grow || (uint64_t)mdl_managed(m) + need > cap_blocks(m)) {
            m->k.exhausted++;
            return KVP_EEXHAUSTED;
        }
        grow(m, L, need);
        m->k.grown += need;
    }
    for (uint32_t i = 0; i < cnt; i++) {
        kvp_block b = next_pick(m, L);
        free_remove(m, b);
        hand_out(m, b, oi, take ? KVP_FMT_FP16 : fmt, 1);
        ids[i] = b;
    }
    *n_out = (size_t)cnt;
    m->k.alloc_calls++;
    m->k.blocks_allocated += cnt;
    return KVP_OK;
}

kvp_status mdl_take_each(model *m, int stream, const int *ois, size_t n, kvp_block *ids,
                         size_t *n_taken)
{
    kvp_status rc = KVP_OK;
    size_t k = 0, one;
    for (; k < n && (rc = mdl_alloc(m, stream, 1, ois[k], 0, 1, 1, &ids[k], &one)) == KVP_OK; k++)
        ;
    *n_taken = k;
    return rc;
}

kvp_status mdl_take_id(model *m, kvp_block id, int oi)
{
    kvp_status bad = id_status(m, id);
    if (bad)
        return bad;
    if (m->b[id].state == KVP_BLOCK_IN_USE)
        return KVP_EBUSY;
    free_remove(m, id);
    /* Header is silent on take_id's format: "for fresh content"; the model
     * learns it from the first kvp_block_get. */
    hand_out(m, id, oi, KVP_FMT_FP16, 0);
    m->k.alloc_calls++;
    m->k.blocks_allocated++;
    return KVP_OK;
}

kvp_status mdl_free(model *m, const kvp_block *ids, size_t n, int oi)
{
    uint32_t named[MB];
    memset(named, 0, sizeof named);
    for (size_t i = 0; i < n; i++) {
        kvp_block id = ids[i];
        kvp_status bad = id_status(m, id);
        if (bad)
            return bad;
        if (mdl_is_free(&m->b[id]))
            return KVP_EDOUBLEFREE;
        uint32_t c = ++named[id];
        if (c > mdl_refcnt(&m->b[id]))
            return KVP_EDOUBLEFREE;
        if (c > mdl_held(&m->b[id], oi))
            return KVP_ENOTOWNER;
    }
    kvp_block freed[MB] = {0};
    uint32_t nf = 0;
    for (size_t i = 0; i < n; i++) {
        mblk *k = &m->b[ids[i]];
        holder_drop(k, oi);
        owner_ref_drop(m, oi, ids[i]);
        if (mdl_refcnt(k) == 0) {
            k->state = k->hash >= 0 ? KVP_BLOCK_CACHED : KVP_BLOCK_VACANT;
            freed[nf++] = ids[i];
        }
    }
    join_free(m, freed, nf);
    if (oi >= 0 && m->o[oi].n == 0 && !m->o[oi].registered)
        m->o[oi].active = 0;
    if (n > 0) {
        m->k.free_calls++;
        m->k.blocks_freed += n;
    }
    return KVP_OK;
}

kvp_status mdl_free_owner(model *m, int oi, size_t *n_freed)
{
    if (oi < 0)
        return KVP_EINVAL;
    mown *o = &m->o[oi];
    if (!o->active)
        return KVP_ENOTFOUND;
    /* Newest first; the blocks whose last reference goes join the free
     * blocks as one batch in that order (the newest is the first reused). */
    kvp_block freed[MB] = {0};
    uint32_t nf = 0;
    for (uint32_t i = o->n; i-- > 0;) {
        mblk *k = &m->b[o->refs[i]];
        holder_drop(k, oi);
        if (mdl_refcnt(k) == 0) {
            k->state = k->hash >= 0 ? KVP_BLOCK_CACHED : KVP_BLOCK_VACANT;
            freed[nf++] = o->refs[i];
        }
    }
    join_free(m, freed, nf);
    *n_freed = o->n;
    m->k.free_calls++;
    m->k.blocks_freed += o->n;
    o->n = 0;
    o->active = 0;
    o->registered = 0;
    return KVP_OK;
}

kvp_status mdl_register(model *m, int oi)
{
    if (oi < 0)
        return KVP_EINVAL;
    if (m->o[oi].active)
        return KVP_EOWNERACTIVE;
    m->o[oi].active = 1;
    m->o[oi].registered = 1;
    m->o[oi].n = 0;
    return KVP_OK;
}

kvp_status mdl_release(model *m, int oi)
{
    if (oi < 0)
        return KVP_EINVAL;
    if (!m->o[oi].active)
        return KVP_ENOTFOUND;
    if (m->o[oi].n)
        return KVP_EBUSY;
    m->o[oi].active = 0;
    m->o[oi].registered = 0;
    return KVP_OK;
}

kvp_status mdl_set_fill(model *m, kvp_block id, uint32_t fill)
{
    kvp_status bad = id_status(m, id);
    if (bad)
        return bad;
    if (fill > m->c.bs)
        return KVP_EINVAL;
    if (mdl_is_free(&m->b[id]))
        return KVP_EDOUBLEFREE;
    m->b[id].fill = fill;
    return KVP_OK;
}

kvp_status mdl_claim(model *m, kvp_block id, int oi)
{
    kvp_status bad = id_status(m, id);
    if (bad)
        return bad;
    mblk *k = &m->b[id];
    if (k->state == KVP_BLOCK_VACANT)
        return KVP_ENOTFOUND;
    if (k->state == KVP_BLOCK_CACHED) {
        free_remove(m, id);
        k->state = KVP_BLOCK_IN_USE; /* keeps content, fill and format */
        k->prot = 0;
    }
    k->hit = 1;
    holder_add(k, oi);
    owner_ref_add(m, oi, id);
    return KVP_OK;
}

/* kvpool.h kvp_set_priority: a cached block rejoins its new priority's
 * order as if freed now. */
static void set_priority(model *m, kvp_block id, unsigned prio)
{
    mblk *k = &m->b[id];
    k->prio = prio;
    if (k->state == KVP_BLOCK_CACHED && m->c.reuse != KVP_REUSE_FIFO)
        policy_insert(m, id);
}

kvp_status mdl_set_priority(model *m, kvp_block id, unsigned prio)
{
    if (id < m->top && m->b[id].is_null)
        return KVP_EINVAL;
    if (mdl_bad_id(m, id))
        return KVP_ERANGE;
    if (prio > KVP_PRIORITY_MAX || m->c.reuse == KVP_REUSE_FIFO)
        return KVP_EINVAL;
    if (m->b[id].state != KVP_BLOCK_IN_USE && m->b[id].state != KVP_BLOCK_CACHED)
        return KVP_ENOTFOUND;
    set_priority(m, id, prio);
    return KVP_OK;
}

kvp_status mdl_seq_raise_priority(model *m, int slot, size_t n, unsigned prio)
{
    if (prio > KVP_PRIORITY_MAX || m->c.reuse == KVP_REUSE_FIFO)
        return KVP_EINVAL;
    mseq *q = &m->sq[slot];
    for (size_t i = 0; i < n && i < q->nblocks; i++)
        if (m->b[q->blocks[i]].prio < prio)
            set_priority(m, q->blocks[i], prio);
    return KVP_OK;
}

kvp_status mdl_publish(model *m, kvp_block id, int h)
{
    if (!m->c.prefix)
        return KVP_EINVAL;
    kvp_status bad = id_status(m, id);
    if (bad)
        return bad;
    mblk *k = &m->b[id];
    if (mdl_is_free(k))
        return KVP_EDOUBLEFREE;
    if (k->hash == h)
        return KVP_OK;
    if (k->hash >= 0)
        return KVP_EBUSY;
    index_entry(m, id, h);
    return KVP_OK;
}

kvp_status mdl_lookup(const model *m, int stream, int h, kvp_block *out)
{
    int L = mdl_list(m, stream);
    if (L < 0)
        return KVP_EINVAL;
    kvp_block best = KVP_NO_BLOCK;
    uint64_t bs = UINT64_MAX;
    for (uint32_t i = 0; i < m->top; i++) {
        const mblk *k = &m->b[i];
        if (k->hash == h && k->list == L && mdl_is_managed(k) && k->seq < bs) {
            best = i;
            bs = k->seq;
        }
    }
    if (best == KVP_NO_BLOCK)
        return KVP_ENOTFOUND;
    *out = best;
    return KVP_OK;
}

/* kvp_claim_prefix: for each hs[k] in order, mdl_lookup, stopping at the
 * first miss, then mdl_claim, stopping at the first that fails; ids[k] the
 * block claimed for hs[k], *n_hit the claims done. */
kvp_status mdl_claim_prefix(model *m, int stream, const int *hs, size_t n, int oi,
                            kvp_block *ids, size_t *n_hit)
{
    if (mdl_list(m, stream) < 0)
        return KVP_EINVAL;
    kvp_status rc = KVP_OK;
    size_t k = 0;
    for (; k < n; k++) {
        kvp_block b;
        if (mdl_lookup(m, stream, hs[k], &b) != KVP_OK || (rc = mdl_claim(m, b, oi)) != KVP_OK)
            break;
        ids[k] = b;
    }
    *n_hit = k;
    return rc;
}

/* kvp_publish_each: mdl_publish of (ids[k], hs[k]) in order, stopping at
 * the first that fails; *n_done the publishes done. */
kvp_status mdl_publish_each(model *m, const kvp_block *ids, const int *hs, size_t n,
                            size_t *n_done)
{
    if (!m->c.prefix)
        return KVP_EINVAL;
    kvp_status rc = KVP_OK;
    size_t k = 0;
    while (k < n && (rc = mdl_publish(m, ids[k], hs[k])) == KVP_OK)
        k++;
    *n_done = k;
    return rc;
}

kvp_status mdl_unpublish(model *m, kvp_block id)
{
    kvp_status bad = id_status(m, id);
    if (bad)
        return bad;
    if (m->b[id].hash < 0)
        return KVP_ENOTFOUND;
    evict_entry(m, id);
    if (m->b[id].state == KVP_BLOCK_CACHED)
        cached_to_vacant(m, id);
    return KVP_OK;
}

kvp_status mdl_evict(model *m, int stream, uint32_t n, uint32_t *n_ev)
{
    int L = mdl_list(m, stream);
    if (L < 0)
        return KVP_EINVAL;
    uint32_t k = 0;
    while (k < n) {
        kvp_block b = mdl_victim(m, L);
        if (b == KVP_NO_BLOCK)
            break;
        evict_entry(m, b);
        cached_to_vacant(m, b);
        k++;
    }
    *n_ev = k;
    return KVP_OK;
}

kvp_status mdl_ensure(model *m, int stream, uint32_t n)
{
    int L = mdl_list(m, stream);
    if (L < 0)
        return KVP_EINVAL;
    uint32_t v = mdl_n_state(m, L, KVP_BLOCK_VACANT);
    uint32_t c = mdl_n_state(m, L, KVP_BLOCK_CACHED);
    if (v >= n)
        return KVP_OK;
    if (v + c < n)
        return KVP_EEXHAUSTED;
    for (uint32_t i = v; i < n; i++) {
        kvp_block b = mdl_victim(m, L);
        evict_entry(m, b);
        cached_to_vacant(m, b);
    }
    return KVP_OK;
}

/* Drop every index entry without per-block callbacks.  Which order the
 * cached blocks become vacant in is not observable except through LIFO
 * reuse; the model converts them least recently freed first. */
static void forget_all(model *m)
{
    record_ev(m, -1, KVP_NO_BLOCK);
    m->ghost_n = 0;
    for (int L = 0; L < m->nl; L++) {
        kvp_block b;
        while ((b = mdl_victim(m, L)) != KVP_NO_BLOCK) {
            m->b[b].hash = -1;
            cached_to_vacant(m, b);
        }
    }
    for (uint32_t i = 0; i < m->top; i++)
        m->b[i].hash = -1;
}

kvp_status mdl_clear_index(model *m)
{
    forget_all(m);
    return KVP_OK;
}

kvp_status mdl_reset_prefix(model *m)
{
    for (uint32_t i = 0; i < m->top; i++)
        if (m->b[i].state == KVP_BLOCK_IN_USE && !m->b[i].is_null)
            return KVP_EBUSY;
    forget_all(m);
    return KVP_OK;
}

kvp_status mdl_extend(model *m, int stream, uint32_t n, uint32_t *added)
{
    int L = mdl_list(m, stream);
    if (L < 0)
        return KVP_EINVAL;
    uint32_t room = cap_blocks(m) - mdl_managed(m);
    uint32_t k = n < room ? n : room;
    grow(m, L, k);
    m->k.extended += k;
    *added = k;
    return KVP_OK;
}

static void retire_free(model *m, kvp_block b)
{
    if (m->b[b].hash >= 0)
        evict_entry(m, b);
    free_remove(m, b);
    int L = m->b[b].list;
    int reborn = m->b[b].reborn;
    memset(&m->b[b], 0, sizeof m->b[b]);
    reset_policy(&m->b[b]);
    m->b[b].state = KVP_BLOCK_RETIRED;
    m->b[b].list = L;
    m->b[b].hash = -1;
    m->b[b].reborn = reborn;
    m->k.retired++;
}

kvp_status mdl_shrink(model *m, int stream, uint32_t target, uint32_t *n_ret)
{
    int L = mdl_list(m, stream);
    if (L < 0)
        return KVP_EINVAL;
    uint32_t k = 0;
    while (mdl_n_free(m, L) > target) {
        kvp_block pick = KVP_NO_BLOCK;
        for (int want = KVP_BLOCK_VACANT; want <= KVP_BLOCK_CACHED && pick == KVP_NO_BLOCK;
             want++)
            for (uint32_t i = m->top; i-- > 0;)
                if (m->b[i].state == want && m->b[i].list == L) {
                    pick = i;
                    break;
                }
        retire_free(m, pick);
        k++;
    }
    *n_ret = k;
    return KVP_OK;
}

kvp_status mdl_retire_top(model *m, kvp_block *ret, kvp_block *moved)
{
    kvp_block t = KVP_NO_BLOCK;
    for (uint32_t i = m->top; i-- > 0;)
        if (mdl_is_managed(&m->b[i])) {
            t = i;
            break;
        }
    if (t == KVP_NO_BLOCK)
        return KVP_EEXHAUSTED;
    if (m->b[t].is_null)
        return KVP_EINVAL;
    if (mdl_is_free(&m->b[t])) {
        retire_free(m, t);
        *ret = t;
        *moved = KVP_NO_BLOCK;
        return KVP_OK;
    }
    int L = m->b[t].list;
    kvp_block d = next_pick(m, L);
    if (d == KVP_NO_BLOCK)
        return KVP_EEXHAUSTED;
    free_remove(m, d);
    if (m->b[d].hash >= 0)
        evict_entry(m, d);
    int reborn = m->b[d].reborn;
    m->b[d] = m->b[t];
    m->b[d].ever = 1;
    m->b[d].reborn = reborn;
    for (int oi = 0; oi < NOWN; oi++)
        for (uint32_t i = 0; i < m->o[oi].n; i++)
            if (m->o[oi].refs[i] == t)
                m->o[oi].refs[i] = d;
    for (int q = 0; q < MSEQ; q++) /* sequences follow the move */
        for (uint32_t i = 0; m->sq[q].live && i < m->sq[q].nblocks; i++)
            if (m->sq[q].blocks[i] == t)
                m->sq[q].blocks[i] = d;
    int treborn = m->b[t].reborn;
    memset(&m->b[t], 0, sizeof m->b[t]);
    reset_policy(&m->b[t]);
    m->b[t].state = KVP_BLOCK_RETIRED;
    m->b[t].list = L;
    m->b[t].hash = -1;
    m->b[t].reborn = treborn;
    m->k.retired++;
    m->k.relocated++;
    *ret = t;
    *moved = d;
    return KVP_OK;
}

kvp_status mdl_pool_clear(model *m)
{
    int any = 0;
    for (uint32_t i = 0; i < m->top; i++)
        any |= mdl_is_managed(&m->b[i]) && m->b[i].hash >= 0;
    uint32_t top = m->top;
    int nev = m->nev;
    int evh[MAXEV];
    kvp_block evb[MAXEV];
    memcpy(evh, m->ev_hash, sizeof evh);
    memcpy(evb, m->ev_block, sizeof evb);
    mcfg c = m->c;
    mdl_init(m, &c);
    memcpy(m->ev_hash, evh, sizeof evh);
    memcpy(m->ev_block, evb, sizeof evb);
    m->nev = nev;
    for (uint32_t i = c.nblocks; i < top; i++)
        m->b[i].state = M_GONE;
    m->top = top;
    if (any)
        record_ev(m, -1, KVP_NO_BLOCK);
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* Sequences                                                                 */
/* ------------------------------------------------------------------------ */

int mdl_seq_find(const model *m, uint64_t id)
{
    for (int i = 0; i < MSEQ; i++)
        if (m->sq[i].live && m->sq[i].id == id)
            return i;
    return -1;
}

static int seq_slot(const model *m)
{
    for (int i = 0; i < MSEQ; i++)
        if (!m->sq[i].live)
            return i;
    return -1;
}

/* "Sequences need one shared free list"; "KVP_EOWNERACTIVE (a sequence with
 * that id exists)".  The driver never asks for more than MSEQ at once. */
kvp_status mdl_seq_create(model *m, uint64_t id, int extra, int *slot)
{
    if (m->c.sep)
        return KVP_EINVAL;
    if (mdl_seq_find(m, id) >= 0)
        return KVP_EOWNERACTIVE;
    int s = seq_slot(m);
    if (s < 0)
        return KVP_ENOMEM; /* the model's own limit; drivers avoid it */
    memset(&m->sq[s], 0, sizeof m->sq[s]);
    m->sq[s].live = 1;
    m->sq[s].id = id;
    m->sq[s].extra = extra;
    *slot = s;
    return KVP_OK;
}

/* Room for `need` more blocks from the shared list, growing if allowed:
 * the same rule as kvp_alloc (grow just enough within the cap, otherwise
 * exhausted, counted). */
static kvp_status seq_room(model *m, uint32_t avail, uint32_t need)
{
    if (need <= avail)
        return KVP_OK;
    uint32_t more = need - avail;
    if (!m->c.grow || (uint64_t)mdl_managed(m) + more > cap_blocks(m)) {
        m->k.exhausted++;
        return KVP_EEXHAUSTED;
    }
    grow(m, 0, more);
    m->k.grown += more;
    return KVP_OK;
}

/* A fresh block for a sequence: reuse order, one sequence reference. */
static kvp_block seq_take(model *m)
{
    kvp_block b = next_pick(m, 0);
    free_remove(m, b);
    hand_out(m, b, MDL_SEQ, KVP_FMT_FP16, 1);
    m->k.blocks_allocated++;
    return b;
}

/* Publish a sequence block that just became full, unless it already holds
 * content (the header: publishing is "of the prompt's full blocks that were
 * not cached"; a block published by the caller keeps its hash). */
static void seq_publish(model *m, kvp_block b, int h)
{
    if (!m->c.prefix || m->b[b].hash >= 0)
        return;
    index_entry(m, b, h);
}

kvp_status mdl_seq_admit(model *m, int slot, size_t n, const int *h, size_t *cached)
{
    mseq *q = &m->sq[slot];
    if (n == 0)
        return KVP_EINVAL;
    if (q->ntokens)
        return KVP_EBUSY;
    size_t bs = m->c.bs, nfull = n / bs, nblocks = (n + bs - 1) / bs;
    /* longest cached prefix, leaving one token to compute */
    size_t max_hit = m->c.prefix ? (n - 1) / bs : 0, k = 0;
    kvp_block match[MSEQB];
    for (; k < max_hit; k++)
        if (mdl_lookup(m, KVP_STREAM_SHARED, h[k], &match[k]) != KVP_OK)
            break;
    /* matched cached blocks leave the free list: never evicted for this */
    uint32_t matched_free = 0;
    for (size_t i = 0; i < k; i++) {
        int dup = 0;
        for (size_t j = 0; j < i; j++)
            dup |= match[j] == match[i];
        matched_free += !dup && m->b[match[i]].state == KVP_BLOCK_CACHED;
    }
    kvp_status rc = seq_room(m, mdl_n_free(m, 0) - matched_free, (uint32_t)(nblocks - k));
    if (rc)
        return rc;
    for (size_t i = 0; i < k; i++) {
        mblk *b = &m->b[match[i]];
        if (b->state == KVP_BLOCK_CACHED) {
            free_remove(m, match[i]);
            b->state = KVP_BLOCK_IN_USE; /* keeps content, fill, format */
            b->prot = 0;
        }
        b->hit = 1;
        b->seqref++;
        q->blocks[i] = match[i];
    }
    for (size_t i = k; i < nblocks; i++)
        q->blocks[i] = seq_take(m);
    for (size_t i = k; i < nblocks; i++)
        m->b[q->blocks[i]].fill = i < nfull ? (uint32_t)bs : (uint32_t)(n % bs);
    q->nblocks = (uint32_t)nblocks;
    q->nhashes = m->c.prefix ? (uint32_t)nfull : 0;
    q->ntokens = n;
    for (size_t i = 0; i < q->nhashes; i++)
        q->hashes[i] = h[i];
    for (size_t i = k; i < q->nhashes; i++)
        seq_publish(m, q->blocks[i], h[i]);
    m->k.prefix_queries += max_hit;
    m->k.prefix_hits += k;
    m->k.alloc_calls++;
    *cached = k * bs;
    return KVP_OK;
}

kvp_status mdl_seq_append(model *m, int slot, size_t n, const int *h)
{
    mseq *q = &m->sq[slot];
    if (n == 0)
        return KVP_OK;
    size_t bs = m->c.bs, old_fill = q->ntokens % bs, total = q->ntokens + n;
    size_t nblocks = (total + bs - 1) / bs, nfull = total / bs, first = q->ntokens / bs;
    kvp_block last = q->nblocks ? q->blocks[q->nblocks - 1] : KVP_NO_BLOCK;
    int cow = old_fill && mdl_refcnt(&m->b[last]) > 1;
    uint32_t fresh = (uint32_t)(nblocks - q->nblocks);
    kvp_status rc = seq_room(m, mdl_n_free(m, 0), fresh + (uint32_t)cow);
    if (rc)
        return rc;
    if (cow) { /* copy-on-write of the shared partial last block */
        kvp_block b = seq_take(m);
        m->b[b].fill = m->b[last].fill;
        m->b[last].seqref--;
        q->blocks[q->nblocks - 1] = b;
        m->k.cow_copies++;
    }
    for (size_t i = q->nblocks; i < nblocks; i++)
        q->blocks[i] = seq_take(m);
    for (size_t i = first; i < nblocks; i++)
        m->b[q->blocks[i]].fill = i < nfull ? (uint32_t)bs : (uint32_t)(total % bs);
    q->nblocks = (uint32_t)nblocks;
    if (m->c.prefix) {
        for (size_t i = first; i < nfull; i++) {
            q->hashes[i] = h[i - first];
            seq_publish(m, q->blocks[i], h[i - first]);
        }
        q->nhashes = (uint32_t)nfull;
    }
    q->ntokens = total;
    m->k.alloc_calls += fresh + (uint32_t)cow > 0;
    return KVP_OK;
}

/* Drop one sequence reference on bl[n-1] .. bl[0], last first; the blocks
 * whose last reference goes join the free blocks in that order, like one
 * kvp_free. */
static void seq_drop(model *m, const kvp_block *bl, uint32_t n)
{
    kvp_block freed[MSEQB] = {0}; /* (GCC cannot see that nf bounds the reads) */
    uint32_t nf = 0;
    for (uint32_t i = n; i-- > 0;) {
        mblk *k = &m->b[bl[i]];
        k->seqref--;
        if (mdl_refcnt(k) == 0) {
            k->state = k->hash >= 0 ? KVP_BLOCK_CACHED : KVP_BLOCK_VACANT;
            freed[nf++] = bl[i];
        }
    }
    join_free(m, freed, nf);
}

/* "Keep only the first n tokens": the dropped tail's blocks join the free
 * blocks last first, like a destroy; when n ends inside a block another
 * sequence holds or that is published, a fresh copy takes its place and the
 * old one is dropped after (a second join).  The room for the copy counts
 * what the tail frees. */
kvp_status mdl_seq_truncate(model *m, int slot, size_t n)
{
    mseq *q = &m->sq[slot];
    if (n > q->ntokens)
        return KVP_EINVAL;
    if (n == q->ntokens)
        return KVP_OK;
    size_t bs = m->c.bs, fill = n % bs, keep = (n + bs - 1) / bs;
    kvp_block last = fill ? q->blocks[keep - 1] : KVP_NO_BLOCK;
    int copy = fill && (mdl_refcnt(&m->b[last]) > 1 || m->b[last].hash >= 0);
    uint32_t sole = 0;
    for (size_t i = keep; i < q->nblocks; i++)
        sole += mdl_refcnt(&m->b[q->blocks[i]]) == 1;
    if (copy) {
        kvp_status rc = seq_room(m, mdl_n_free(m, 0) + sole, 1);
        if (rc)
            return rc;
    }
    uint32_t dropped = q->nblocks - (uint32_t)keep;
    seq_drop(m, q->blocks + keep, dropped);
    q->nblocks = (uint32_t)keep;
    if (copy) {
        kvp_block b = seq_take(m);
        m->b[b].fill = (uint32_t)fill;
        q->blocks[keep - 1] = b;
        mdl_note_peak(m); /* the copy and its source are both in use */
        seq_drop(m, &last, 1);
        m->k.cow_copies++;
        m->k.alloc_calls++;
        dropped++;
    } else if (fill) {
        m->b[last].fill = (uint32_t)fill;
    }
    if (dropped) {
        m->k.free_calls++;
        m->k.blocks_freed += dropped;
    }
    q->nhashes = m->c.prefix ? (uint32_t)(n / bs) : 0;
    q->ntokens = n;
    return KVP_OK;
}

kvp_status mdl_seq_fork(model *m, int parent, uint64_t child_id, int *slot)
{
    if (mdl_seq_find(m, child_id) >= 0)
        return KVP_EOWNERACTIVE;
    int s = seq_slot(m);
    if (s < 0)
        return KVP_ENOMEM;
    m->sq[s] = m->sq[parent];
    m->sq[s].id = child_id;
    for (uint32_t i = 0; i < m->sq[s].nblocks; i++) {
        m->b[m->sq[s].blocks[i]].seqref++;
    }
    *slot = s;
    return KVP_OK;
}

/* "Free the sequence's blocks, last block first": the blocks whose last
 * reference goes join the free blocks in that order, like one kvp_free. */
kvp_status mdl_seq_destroy(model *m, int slot)
{
    mseq *q = &m->sq[slot];
    seq_drop(m, q->blocks, q->nblocks);
    if (q->nblocks) {
        m->k.free_calls++;
        m->k.blocks_freed += q->nblocks;
    }
    q->live = 0;
    return KVP_OK;
}

/* ------------------------------------------------------------------------ */
/* KV events as a router sees them                                           */
/* ------------------------------------------------------------------------ */

/* kvpool.h "Events": the last 8 bytes big-endian, 0 sent as 1. */
static uint64_t external(const kvp_hash *h)
{
    uint64_t x = 0;
    for (int i = 24; i < 32; i++)
        x = x << 8 | h->b[i];
    return x ? x : 1;
}

/* The slot of external hash x in v (added with count 0 when `add`), or -1
 * (also when v is full). */
static int sub_slot(msub *v, uint64_t x, int add)
{
    for (int i = 0; i < v->n; i++)
        if (v->ext[i] == x)
            return i;
    if (!add || v->n >= MSUB)
        return -1;
    v->ext[v->n] = x;
    v->cnt[v->n] = 0;
    return v->n++;
}

int mdl_events_diff(const model *m, msub *v, kvp_pool *p, const kvp_hash *content, char *msg,
                    size_t cap)
{
    const kvp_event *ev = NULL;
    size_t n = 0;
    uint64_t dropped = 0;
    kvp_status s = kvp_events_take(p, &ev, &n, &dropped);
    if (s != KVP_OK || dropped) {
        snprintf(msg, cap, "kvp_events_take: %s, %" PRIu64 " dropped", kvp_strerror(s), dropped);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const kvp_event *e = &ev[i];
        if (e->kind == KVP_EVENT_ALL_CLEARED) {
            v->n = 0;
            continue;
        }
        int pat = e->kind == KVP_EVENT_STORED && e->has_parent ? sub_slot(v, e->parent, 0) : 0;
        if (pat < 0 || (e->has_parent && v->cnt[pat] == 0)) { /* routers reject it */
            snprintf(msg, cap, "event %zu: stored block names parent %#" PRIx64
                     ", which the subscriber does not hold", i, e->parent);
            return -1;
        }
        for (size_t k = 0; k < e->n_hashes; k++) {
            int at = sub_slot(v, e->hashes[k], e->kind == KVP_EVENT_STORED);
            if (at >= 0 && e->kind == KVP_EVENT_STORED) {
                v->cnt[at]++;
            } else if (at >= 0 && e->kind == KVP_EVENT_REMOVED && v->cnt[at] > 0) {
                v->cnt[at]--;
            } else {
                snprintf(msg, cap, "event %zu (kind %d): hash %#" PRIx64 " %s", i, (int)e->kind,
                         e->hashes[k], at < 0 ? "not announced, or the view is full"
                                              : "removed but not announced");
                return -1;
            }
        }
    }
    static msub idx; /* the model's index, counted the same way */
    idx.n = 0;
    int indexed = 0, announced = 0;
    for (uint32_t b = 0; b < m->top; b++) {
        const mblk *k = &m->b[b];
        if (k->hash < 0 || !mdl_is_managed(k))
            continue;
        int first = 1; /* the first managed block with this content id */
        for (uint32_t a = 0; a < b && first; a++)
            first = !(m->b[a].hash == k->hash && mdl_is_managed(&m->b[a]));
        if (!first)
            continue;
        int at = sub_slot(&idx, external(&content[k->hash]), 1);
        if (at < 0) {
            snprintf(msg, cap, "index: more than %d external hashes", MSUB);
            return -1;
        }
        idx.cnt[at]++;
        indexed++;
    }
    for (int i = 0; i < v->n; i++)
        announced += v->cnt[i];
    for (int i = 0; i < idx.n; i++) {
        int at = sub_slot(v, idx.ext[i], 0);
        int got = at < 0 ? 0 : v->cnt[at];
        if (got != idx.cnt[i]) {
            snprintf(msg, cap, "hash %#" PRIx64 " announced %d times, indexed as %d hashes",
                     idx.ext[i], got, idx.cnt[i]);
            return -1;
        }
    }
    if (announced != indexed) {
        snprintf(msg, cap, "the subscriber knows %d hashes, the index holds %d", announced,
                 indexed);
        return -1;
    }
    return 0;
}
