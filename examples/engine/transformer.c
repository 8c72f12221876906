/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transformer.c — the transformer behind the engine example: weights (seeded or
 * from a llama2.c checkpoint), one-token forward pass, sampling.
 *
 * Exactness: every reduction runs in a fixed order that depends only on the
 * sizes (dot products in 8 lanes over the input, then the lanes summed in
 * order; attention over positions 0..pos in order), never on where the K/V
 * rows live.  So a paged cache and a dense one give the same bits.
 */
#include "transformer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Limits that keep every size product far inside 64 bits and every index
 * inside int. */
#define MDL_MAX_DIM (1 << 16)
#define MDL_MAX_LAYERS 1024
#define MDL_MAX_VOCAB (1 << 22)
#define MDL_MAX_SEQ (1 << 24)
#define MDL_MAX_FLOATS ((uint64_t)1 << 32)

/* splitmix64's finaliser over x plus the golden-ratio increment. */
uint64_t tfm_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Floats of every tensor except the classifier (a llama2.c file's body up
 * to rms_final). */
static uint64_t body_floats(const tfm_config *c)
{
    uint64_t d = (uint64_t)c->dim, h = (uint64_t)c->hidden_dim, l = (uint64_t)c->n_layers;
    uint64_t kv = d / (uint64_t)c->n_heads * (uint64_t)c->n_kv_heads;
    return (uint64_t)c->vocab_size * d + l * d + l * d * d + 2 * l * kv * d + l * d * d + l * d +
           3 * l * h * d + d;
}

/* Floats of the two rotary tables a llama2.c file carries (skipped). */
static uint64_t rope_floats(const tfm_config *c)
{
    return (uint64_t)c->seq_len * (uint64_t)(c->dim / c->n_heads);
}

int tfm_config_check(const tfm_config *c, char *err, size_t cap)
{
    if (c->dim <= 0 || c->hidden_dim <= 0 || c->n_layers <= 0 || c->n_heads <= 0 ||
        c->n_kv_heads <= 0 || c->vocab_size <= 0 || c->seq_len <= 0) {
        snprintf(err, cap, "every model size must be positive");
        return -1;
    }
    if (c->dim > MDL_MAX_DIM || c->hidden_dim > 4 * MDL_MAX_DIM || c->n_layers > MDL_MAX_LAYERS ||
        c->vocab_size > MDL_MAX_VOCAB || c->seq_len > MDL_MAX_SEQ) {
        snprintf(err, cap, "model too large (dim <= %d, hidden <= %d, layers <= %d, vocab <= %d, "
                 "seq_len <= %d)", MDL_MAX_DIM, 4 * MDL_MAX_DIM, MDL_MAX_LAYERS, MDL_MAX_VOCAB,
                 MDL_MAX_SEQ);
        return -1;
    }
    if (c->dim % c->n_heads || (c->dim / c->n_heads) % 2 || c->n_heads % c->n_kv_heads) {
        snprintf(err, cap, "heads must divide dim into even head sizes and kv heads divide heads");
        return -1;
    }
    if (body_floats(c) + (uint64_t)c->vocab_size * (uint64_t)c->dim > MDL_MAX_FLOATS) {
        snprintf(err, cap, "model too large (more than 2^32 weights)");
        return -1;
    }
    return 0;
}

size_t tfm_block_bytes(const tfm_config *c, size_t block_size)
{
    size_t kv = (size_t)(c->dim / c->n_heads * c->n_kv_heads);
    return (size_t)c->n_layers * 2 * block_size * kv * sizeof(float);
}

/* Allocate the weights for c and point every tensor into them. */
static int layout(tfm_model *m, const tfm_config *c, int shared, char *err, size_t cap)
{
    memset(m, 0, sizeof *m);
    if (tfm_config_check(c, err, cap))
        return -1;
    m->cfg = *c;
    m->head_dim = c->dim / c->n_heads;
    m->kv_dim = m->head_dim * c->n_kv_heads;
    m->shared_classifier = shared;
    uint64_t n = body_floats(c) + (shared ? 0 : (uint64_t)c->vocab_size * (uint64_t)c->dim);
    m->n_floats = (size_t)n;
    m->mem = malloc(m->n_floats * sizeof *m->mem);
    if (!m->mem) {
        snprintf(err, cap, "out of memory for %zu weights", m->n_floats);
        return -1;
    }
    size_t d = (size_t)c->dim, h = (size_t)c->hidden_dim, l = (size_t)c->n_layers;
    size_t kv = (size_t)m->kv_dim, v = (size_t)c->vocab_size;
    float *p = m->mem;
    m->tok_emb = p, p += v * d;
    m->rms_att = p, p += l * d;
    m->wq = p, p += l * d * d;
    m->wk = p, p += l * kv * d;
    m->wv = p, p += l * kv * d;
    m->wo = p, p += l * d * d;
    m->rms_ffn = p, p += l * d;
    m->w1 = p, p += l * h * d;
    m->w2 = p, p += l * d * h;
    m->w3 = p, p += l * h * d;
    m->rms_final = p, p += d;
    m->wcls = shared ? m->tok_emb : p;
    return 0;
}

/* n uniform values in [-scale, scale) from the generator state *g. */
static void fill_uniform(float *w, size_t n, float scale, uint64_t *g)
{
    for (size_t i = 0; i < n; i++) {
        *g += 1;
        double u = (double)(tfm_mix(*g) >> 11) * 0x1.0p-53;
        w[i] = (float)((2.0 * u - 1.0) * scale);
    }
}

/* n copies of v. */
static void fill_const(float *w, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        w[i] = v;
}

int tfm_init_seeded(tfm_model *m, const tfm_config *c, uint64_t seed, char *err, size_t cap)
{
    /* A classifier of its own: tied to the embedding, a random model's
     * residual stream (mostly its input embedding) would predict its input. */
    if (layout(m, c, 0, err, cap))
        return -1;
    size_t d = (size_t)c->dim, h = (size_t)c->hidden_dim, l = (size_t)c->n_layers;
    size_t kv = (size_t)m->kv_dim, v = (size_t)c->vocab_size;
    uint64_t g = tfm_mix(seed);
    float sd = 1.0f / sqrtf((float)d), sh = 1.0f / sqrtf((float)h);
    fill_uniform(m->tok_emb, v * d, 1.0f, &g);
    fill_const(m->rms_att, l * d, 1.0f);
    fill_uniform(m->wq, l * d * d, sd, &g);
    fill_uniform(m->wk, l * kv * d, sd, &g);
    fill_uniform(m->wv, l * kv * d, sd, &g);
    fill_uniform(m->wo, l * d * d, sd, &g);
    fill_const(m->rms_ffn, l * d, 1.0f);
    fill_uniform(m->w1, l * h * d, sd, &g);
    fill_uniform(m->w2, l * d * h, sh, &g);
    fill_uniform(m->w3, l * h * d, sd, &g);
    fill_const(m->rms_final, d, 1.0f);
    fill_uniform(m->wcls, v * d, 4.0f * sd, &g);
    return 0;
}

void tfm_free(tfm_model *m)
{
    free(m->mem);
    memset(m, 0, sizeof *m);
}

/* The seven-int header of a llama2.c file. */
static void header_of(const tfm_model *m, int32_t h[7])
{
    const tfm_config *c = &m->cfg;
    h[0] = c->dim, h[1] = c->hidden_dim, h[2] = c->n_layers, h[3] = c->n_heads;
    h[4] = c->n_kv_heads, h[5] = m->shared_classifier ? c->vocab_size : -c->vocab_size;
    h[6] = c->seq_len;
}

int tfm_save(const tfm_model *m, const char *path, char *err, size_t cap)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, cap, "%s: cannot create", path);
        return -1;
    }
    int32_t h[7];
    header_of(m, h);
    size_t body = (size_t)body_floats(&m->cfg), rope = (size_t)rope_floats(&m->cfg);
    int bad = fwrite(h, sizeof h, 1, f) != 1 ||
              fwrite(m->mem, sizeof(float), body, f) != body;
    float zero = 0.0f;
    for (size_t i = 0; i < rope && !bad; i++)
        bad = fwrite(&zero, sizeof zero, 1, f) != 1;
    if (!bad && !m->shared_classifier) {
        size_t ncls = (size_t)m->cfg.vocab_size * (size_t)m->cfg.dim;
        bad = fwrite(m->wcls, sizeof(float), ncls, f) != ncls;
    }
    if (fclose(f) || bad) {
        snprintf(err, cap, "%s: write failed", path);
        return -1;
    }
    return 0;
}

int tfm_load(tfm_model *m, const char *path, char *err, size_t cap)
{
    memset(m, 0, sizeof *m);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, cap, "%s: cannot open", path);
        return -1;
    }
    int32_t h[7];
    int rc = -1;
    if (fread(h, sizeof h, 1, f) != 1) {
        snprintf(err, cap, "%s: shorter than a llama2.c header", path);
        goto out;
    }
    /* A negative vocabulary size means a separate classifier; INT32_MIN has
     * no positive counterpart and becomes 0, which the check refuses. */
    int32_t vocab = h[5] == INT32_MIN ? 0 : h[5] < 0 ? -h[5] : h[5];
    tfm_config c = {h[0], h[1], h[2], h[3], h[4], vocab, h[6]};
    if (tfm_config_check(&c, err, cap))
        goto out;
    /* the file's size before the weights' memory: a short file claiming
     * billions of weights costs nothing */
    size_t body = (size_t)body_floats(&c), rope = (size_t)rope_floats(&c);
    size_t ncls = h[5] > 0 ? 0 : (size_t)c.vocab_size * (size_t)c.dim;
    uint64_t want = sizeof h + (uint64_t)(body + rope + ncls) * sizeof(float);
    long size = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (size < 0 || (uint64_t)size != want) {
        snprintf(err, cap, "%s: %ld bytes, its header says %llu", path, size,
                 (unsigned long long)want);
        goto out;
    }
    if (layout(m, &c, h[5] > 0, err, cap))
        goto out;
    if (fseek(f, (long)sizeof h, SEEK_SET) || fread(m->mem, sizeof(float), body, f) != body ||
        fseek(f, (long)(rope * sizeof(float)), SEEK_CUR) ||
        fread(m->wcls, sizeof(float), ncls, f) != ncls) {
        snprintf(err, cap, "%s: read error", path);
        goto out;
    }
    rc = 0;
out:
    fclose(f);
    if (rc)
        tfm_free(m);
    return rc;
}

int tfm_state_init(tfm_state *s, const tfm_model *m, size_t max_pos)
{
    size_t d = (size_t)m->cfg.dim, h = (size_t)m->cfg.hidden_dim;
    memset(s, 0, sizeof *s);
    s->x = malloc(d * sizeof(float));
    s->xb = malloc(d * sizeof(float));
    s->xb2 = malloc(d * sizeof(float));
    s->q = malloc(d * sizeof(float));
    s->hb = malloc(h * sizeof(float));
    s->hb2 = malloc(h * sizeof(float));
    s->att = malloc((max_pos ? max_pos : 1) * sizeof(float));
    s->att_cap = max_pos;
    if (!s->x || !s->xb || !s->xb2 || !s->q || !s->hb || !s->hb2 || !s->att) {
        tfm_state_free(s);
        return -1;
    }
    return 0;
}

void tfm_state_free(tfm_state *s)
{
    free(s->x), free(s->xb), free(s->xb2), free(s->q), free(s->hb), free(s->hb2), free(s->att);
    memset(s, 0, sizeof *s);
}

/* Dot product in a fixed order: 8 lanes over the index, lanes summed in
 * order, then the tail. */
static float dot(const float *a, const float *b, size_t n)
{
    float lane[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int r = 0; r < 8; r++)
            lane[r] += a[i + r] * b[i + r];
    float s = 0.0f;
    for (int r = 0; r < 8; r++)
        s += lane[r];
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* out[0..rows) = W x, W rows x n, row-major. */
static void matvec(float *out, const float *x, const float *w, size_t n, size_t rows)
{
    for (size_t i = 0; i < rows; i++)
        out[i] = dot(w + i * n, x, n);
}

/* out = w * x / sqrt(mean(x^2) + 1e-5), the sum of squares by dot(). */
static void rmsnorm(float *out, const float *x, const float *w, size_t n)
{
    float ss = dot(x, x, n) / (float)n + 1e-5f;
    float inv = 1.0f / sqrtf(ss);
    for (size_t i = 0; i < n; i++)
        out[i] = w[i] * (x[i] * inv);
}

/* Rotate pairs (v[i], v[i+1]) by pos x 10000^(-(i mod head_dim) / head_dim). */
static void rope(float *v, size_t n, size_t head_dim, size_t pos)
{
    for (size_t i = 0; i < n; i += 2) {
        float freq = 1.0f / powf(10000.0f, (float)(i % head_dim) / (float)head_dim);
        float a = (float)pos * freq, c = cosf(a), s = sinf(a);
        float v0 = v[i], v1 = v[i + 1];
        v[i] = v0 * c - v1 * s;
        v[i + 1] = v0 * s + v1 * c;
    }
}

void tfm_forward(const tfm_model *m, tfm_state *s, uint32_t token, size_t pos, const tfm_kv *kv,
                 float *logits)
{
    const tfm_config *c = &m->cfg;
    size_t d = (size_t)c->dim, hid = (size_t)c->hidden_dim, hd = (size_t)m->head_dim;
    size_t kvd = (size_t)m->kv_dim, bs = kv->block_size;
    size_t group = (size_t)(c->n_heads / c->n_kv_heads);
    float scale = 1.0f / sqrtf((float)hd);
    memcpy(s->x, m->tok_emb + (size_t)token * d, d * sizeof(float));
    for (size_t l = 0; l < (size_t)c->n_layers; l++) {
        size_t koff = 2 * l * bs * kvd, voff = (2 * l + 1) * bs * kvd;
        rmsnorm(s->xb, s->x, m->rms_att + l * d, d);
        matvec(s->q, s->xb, m->wq + l * d * d, d, d);
        float *krow = kv->blocks[pos / bs] + koff + (pos % bs) * kvd;
        float *vrow = kv->blocks[pos / bs] + voff + (pos % bs) * kvd;
        matvec(krow, s->xb, m->wk + l * kvd * d, d, kvd);
        matvec(vrow, s->xb, m->wv + l * kvd * d, d, kvd);
        rope(s->q, d, hd, pos);
        rope(krow, kvd, hd, pos);
        for (size_t h = 0; h < (size_t)c->n_heads; h++) {
            const float *qh = s->q + h * hd;
            size_t ho = (h / group) * hd;
            float mx = -INFINITY;
            for (size_t j = 0; j <= pos; j++) {
                const float *k = kv->blocks[j / bs] + koff + (j % bs) * kvd + ho;
                float a = dot(qh, k, hd) * scale;
                s->att[j] = a;
                mx = a > mx ? a : mx;
            }
            float sum = 0.0f;
            for (size_t j = 0; j <= pos; j++) {
                s->att[j] = expf(s->att[j] - mx);
                sum += s->att[j];
            }
            float *out = s->xb + h * hd;
            memset(out, 0, hd * sizeof(float));
            for (size_t j = 0; j <= pos; j++) {
                const float *v = kv->blocks[j / bs] + voff + (j % bs) * kvd + ho;
                float w = s->att[j] / sum;
                for (size_t i = 0; i < hd; i++)
                    out[i] += w * v[i];
            }
        }
        matvec(s->xb2, s->xb, m->wo + l * d * d, d, d);
        for (size_t i = 0; i < d; i++)
            s->x[i] += s->xb2[i];
        rmsnorm(s->xb, s->x, m->rms_ffn + l * d, d);
        matvec(s->hb, s->xb, m->w1 + l * hid * d, d, hid);
        matvec(s->hb2, s->xb, m->w3 + l * hid * d, d, hid);
        for (size_t i = 0; i < hid; i++) {
            float g = s->hb[i];
            s->hb[i] = g / (1.0f + expf(-g)) * s->hb2[i];
        }
        matvec(s->xb, s->hb, m->w2 + l * d * hid, hid, d);
        for (size_t i = 0; i < d; i++)
            s->x[i] += s->xb[i];
    }
    if (logits) {
        rmsnorm(s->x, s->x, m->rms_final, d);
        matvec(logits, s->x, m->wcls, d, (size_t)c->vocab_size);
    }
}

uint32_t tfm_sample(const float *logits, int vocab, float temperature, uint64_t key)
{
    int best = 0;
    for (int i = 1; i < vocab; i++)
        best = logits[i] > logits[best] ? i : best;
    if (temperature <= 0.0f)
        return (uint32_t)best;
    double mx = logits[best], sum = 0.0;
    for (int i = 0; i < vocab; i++)
        sum += exp(((double)logits[i] - mx) / temperature);
    double u = (double)(tfm_mix(key) >> 11) * 0x1.0p-53 * sum, acc = 0.0;
    for (int i = 0; i < vocab; i++) {
        acc += exp(((double)logits[i] - mx) / temperature);
        if (u < acc)
            return (uint32_t)i;
    }
    return (uint32_t)best;
}
