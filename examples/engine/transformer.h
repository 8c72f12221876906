/* SPDX-License-Identifier: Apache-2.0 */
/*
 * transformer.h — a small decoder-only transformer of the Llama shape, for the
 * engine example: RMSNorm, rotary positions, grouped-query attention, a
 * SwiGLU MLP, greedy and seeded sampling.
 *
 * Weights come from a seed (deterministic on every machine) or from a
 * checkpoint in the llama2.c format.  The forward pass works on one token at
 * one position and reads and writes keys and values through an tfm_kv view:
 * an array of block base addresses and a block size.  A paged cache passes
 * one address per block of a sequence; a dense cache passes one block big
 * enough for the whole sequence.  Both run the same arithmetic in the same
 * order, so their results are equal bit for bit.
 */
#ifndef KVPE_TFM_H
#define KVPE_TFM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct tfm_config {
    int dim;          /* model width */
    int hidden_dim;   /* SwiGLU width */
    int n_layers;
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads; divides n_heads */
    int vocab_size;
    int seq_len;      /* longest position the model accepts */
} tfm_config;

typedef struct tfm_model {
    tfm_config cfg;
    int head_dim, kv_dim;
    float *mem;       /* every weight, one allocation */
    size_t n_floats;
    int shared_classifier;
    float *tok_emb;   /* vocab x dim */
    float *rms_att;   /* layers x dim */
    float *wq;        /* layers x dim x dim      (out x in) */
    float *wk;        /* layers x kv_dim x dim */
    float *wv;        /* layers x kv_dim x dim */
    float *wo;        /* layers x dim x dim */
    float *rms_ffn;   /* layers x dim */
    float *w1;        /* layers x hidden x dim */
    float *w2;        /* layers x dim x hidden */
    float *w3;        /* layers x hidden x dim */
    float *rms_final; /* dim */
    float *wcls;      /* vocab x dim (tok_emb when shared) */
} tfm_model;

/*
 * A view of one sequence's keys and values.  Position j lives in block
 * j / block_size at row j % block_size.  A block holds every layer's K and V
 * for block_size positions: layer l's K rows, then its V rows, each row
 * kv_dim floats (tfm_block_bytes).
 */
typedef struct tfm_kv {
    float *const *blocks;
    size_t block_size;
} tfm_kv;

/* Scratch for one forward pass (a thread may own one). */
typedef struct tfm_state {
    float *x, *xb, *xb2, *hb, *hb2, *q, *att;
    size_t att_cap;
} tfm_state;

/* Check a configuration: every field positive, heads dividing the width into
 * even head sizes, kv heads dividing heads, sizes within int.  Returns 0 or
 * -1 with the reason in err[0..cap). */
int tfm_config_check(const tfm_config *c, char *err, size_t cap);

/* Bytes of one block of `block_size` positions (every layer's K and V). */
size_t tfm_block_bytes(const tfm_config *c, size_t block_size);

/* Fill *m with weights drawn from `seed` (the same on every machine).
 * Returns 0, or -1 (bad configuration, out of memory) with err set. */
int tfm_init_seeded(tfm_model *m, const tfm_config *c, uint64_t seed, char *err, size_t cap);

/*
 * Load a llama2.c checkpoint: seven int32 (dim, hidden_dim, n_layers,
 * n_heads, n_kv_heads, vocab_size, negative when the classifier is separate,
 * seq_len), then the float32 tensors in llama2.c's order.  The file must be
 * exactly that long.  Returns 0, or -1 with err set (unreadable, bad header,
 * wrong length, out of memory); *m is left empty on error.
 */
int tfm_load(tfm_model *m, const char *path, char *err, size_t cap);

/* Write *m as a llama2.c checkpoint (rotary tables written as zeros, which
 * loaders ignore).  Returns 0 or -1 with err set. */
int tfm_save(const tfm_model *m, const char *path, char *err, size_t cap);

/* Release the weights; *m becomes empty.  NULL-safe on an empty model. */
void tfm_free(tfm_model *m);

/* Scratch for attention over up to `max_pos` positions.  0 or -1. */
int tfm_state_init(tfm_state *s, const tfm_model *m, size_t max_pos);
void tfm_state_free(tfm_state *s);

/*
 * Run token `token` at position `pos`: write its K and V rows into `kv`,
 * attend over positions 0..pos (read from `kv`, in position order), and,
 * when logits is not NULL, write vocab_size logits.  Positions below pos
 * must have been written.  pos < seq_len and pos < s's max_pos.
 */
void tfm_forward(const tfm_model *m, tfm_state *s, uint32_t token, size_t pos, const tfm_kv *kv,
                 float *logits);

/*
 * The token drawn from `logits` for the draw keyed by `key`: greedy (the
 * lowest index of the largest logit) when temperature is 0, else a draw
 * from softmax(logits / temperature) with a uniform number made from `key`
 * alone, so it never depends on what else runs.
 */
uint32_t tfm_sample(const float *logits, int vocab, float temperature, uint64_t key);

/* A 64-bit mix (splitmix64 finaliser) for building keys and seeds. */
uint64_t tfm_mix(uint64_t x);

#endif /* KVPE_TFM_H */
