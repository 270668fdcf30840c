/* An external engine written in C, tapped through tapdiff's C ABI (tapdiff/trace.h).
 *
 * A toy llama-style transformer (2 layers, GQA, RoPE, SwiGLU, greedy decoding) with made-up
 * weights. It records every tap of the catalogue (docs/taps.md) the way a real engine would:
 * a batched prefill records N_PROMPT rows per tap at once, each decode step one row; the
 * logits only for the last prompt position during prefill. It asks tapdiff_trace_enabled*()
 * first, so disabled taps cost nothing.
 *
 *   c_engine_tap OUT.h5 [NAME_GLOBS]     e.g. c_engine_tap run.h5 '!*.attn.probs'
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tapdiff/trace.h"

enum {
  N_LAYER = 2,
  N_EMBD = 8,
  N_HEAD = 2,
  N_HEAD_KV = 1,
  HEAD_DIM = 4,
  N_FF = 16,
  N_VOCAB = 32,
  N_PROMPT = 3,
  N_PREDICT = 4,
  N_CTX = N_PROMPT + N_PREDICT,
  KV_DIM = N_HEAD_KV * HEAD_DIM,
  MAX_ROWS = N_PROMPT
};

/* Activations of the positions in flight, one row per position. */
static float x[MAX_ROWS][N_EMBD]; /* residual stream */
static float norm[MAX_ROWS][N_EMBD];
static float q[MAX_ROWS][N_HEAD * HEAD_DIM];
static float k[MAX_ROWS][KV_DIM];
static float v[MAX_ROWS][KV_DIM];
static float probs[MAX_ROWS][N_HEAD][N_CTX]; /* 0 beyond the visible context */
static float att[MAX_ROWS][N_HEAD * HEAD_DIM];
static float proj[MAX_ROWS][N_EMBD];
static float gate[MAX_ROWS][N_FF];
static float up[MAX_ROWS][N_FF];
static float logits[MAX_ROWS][N_VOCAB];
static float k_cache[N_LAYER][N_CTX][KV_DIM];
static float v_cache[N_LAYER][N_CTX][KV_DIM];

static tapdiff_trace* trace;
static int failed;

/* Records rows [0, n) of a tap buffer for positions first..first+n-1 (if enabled). */
static void tap(const char* name, int layer, int first, int n, const float* rows, int rank,
                int64_t d0, int64_t d1) {
  const int64_t shape[2] = {d0, d1};
  if (failed || !tapdiff_trace_enabled_range(trace, name, layer, first, n)) return;
  if (tapdiff_trace_record(trace, name, layer, first, n, shape, rank, rows) != TAPDIFF_OK) {
    fprintf(stderr, "c_engine_tap: %s\n", tapdiff_last_error());
    failed = 1;
  }
}

static float weight(int matrix, int row, int col) {
  return (float)(((matrix * 31 + row * 7 + col * 3) % 11) - 5) * 0.05f;
}

/* y (rows) = W_matrix (rows, cols) @ x (cols) */
static void matvec(int matrix, int rows, int cols, const float* in, float* out) {
  int r, c;
  for (r = 0; r < rows; ++r) {
    float sum = 0.0f;
    for (c = 0; c < cols; ++c) sum += weight(matrix, r, c) * in[c];
    out[r] = sum;
  }
}

static void rmsnorm(const float* in, float* out) {
  float ss = 0.0f;
  int i;
  for (i = 0; i < N_EMBD; ++i) ss += in[i] * in[i];
  ss = 1.0f / sqrtf(ss / N_EMBD + 1e-5f);
  for (i = 0; i < N_EMBD; ++i) out[i] = in[i] * ss;
}

/* RoPE, adjacent pairs, on n_heads heads of HEAD_DIM at position pos. */
static void rope(float* vec, int n_heads, int pos) {
  int h, i;
  for (h = 0; h < n_heads; ++h) {
    for (i = 0; i < HEAD_DIM; i += 2) {
      const float angle = (float)pos * powf(10000.0f, -(float)i / HEAD_DIM);
      float* p = vec + h * HEAD_DIM + i;
      const float a = p[0], b = p[1];
      p[0] = a * cosf(angle) - b * sinf(angle);
      p[1] = a * sinf(angle) + b * cosf(angle);
    }
  }
}

static void attention(int l, int first, int n) {
  int r, h, j, i;
  for (r = 0; r < n; ++r) {
    const int pos = first + r;
    for (h = 0; h < N_HEAD; ++h) {
      const int kv = h / (N_HEAD / N_HEAD_KV);
      float max = -1e30f, sum = 0.0f;
      memset(probs[r][h], 0, sizeof probs[r][h]);
      for (j = 0; j <= pos; ++j) {
        float dot = 0.0f;
        for (i = 0; i < HEAD_DIM; ++i)
          dot += q[r][h * HEAD_DIM + i] * k_cache[l][j][kv * HEAD_DIM + i];
        probs[r][h][j] = dot / sqrtf((float)HEAD_DIM);
        if (probs[r][h][j] > max) max = probs[r][h][j];
      }
      for (j = 0; j <= pos; ++j) sum += (probs[r][h][j] = expf(probs[r][h][j] - max));
      for (j = 0; j <= pos; ++j) probs[r][h][j] /= sum;
      for (i = 0; i < HEAD_DIM; ++i) {
        float acc = 0.0f;
        for (j = 0; j <= pos; ++j) acc += probs[r][h][j] * v_cache[l][j][kv * HEAD_DIM + i];
        att[r][h * HEAD_DIM + i] = acc;
      }
    }
  }
}

/* Runs positions first..first+n-1 (tokens[first..]) through the model; returns the argmax of
 * the last position's logits. */
static int forward(const int32_t* tokens, int first, int n) {
  int r, l, i, best = 0;
  for (r = 0; r < n; ++r) {
    for (i = 0; i < N_EMBD; ++i) x[r][i] = (float)tokens[first + r] + (float)i / 8.0f;
  }
  tap("token_embd", -1, first, n, &x[0][0], 1, N_EMBD, 0);
  for (l = 0; l < N_LAYER; ++l) {
    for (r = 0; r < n; ++r) rmsnorm(x[r], norm[r]);
    tap("attn_norm", l, first, n, &norm[0][0], 1, N_EMBD, 0);
    for (r = 0; r < n; ++r) {
      matvec(10 * l + 0, N_HEAD * HEAD_DIM, N_EMBD, norm[r], q[r]);
      matvec(10 * l + 1, KV_DIM, N_EMBD, norm[r], k[r]);
      matvec(10 * l + 2, KV_DIM, N_EMBD, norm[r], v[r]);
    }
    tap("attn_q", l, first, n, &q[0][0], 1, N_HEAD * HEAD_DIM, 0);
    tap("attn_k", l, first, n, &k[0][0], 1, KV_DIM, 0);
    tap("attn_v", l, first, n, &v[0][0], 1, KV_DIM, 0);
    for (r = 0; r < n; ++r) {
      rope(q[r], N_HEAD, first + r);
      rope(k[r], N_HEAD_KV, first + r);
      memcpy(k_cache[l][first + r], k[r], sizeof k[r]);
      memcpy(v_cache[l][first + r], v[r], sizeof v[r]);
    }
    tap("attn_q.rope", l, first, n, &q[0][0], 1, N_HEAD * HEAD_DIM, 0);
    tap("attn_k.rope", l, first, n, &k[0][0], 1, KV_DIM, 0);
    tap("kv.k", l, first, n, &k_cache[l][first][0], 1, KV_DIM, 0); /* read back from the cache */
    tap("kv.v", l, first, n, &v_cache[l][first][0], 1, KV_DIM, 0);
    attention(l, first, n);
    tap("attn.probs", l, first, n, &probs[0][0][0], 2, N_HEAD, N_CTX);
    tap("attn.out", l, first, n, &att[0][0], 1, N_HEAD * HEAD_DIM, 0);
    for (r = 0; r < n; ++r) matvec(10 * l + 3, N_EMBD, N_HEAD * HEAD_DIM, att[r], proj[r]);
    tap("attn_output", l, first, n, &proj[0][0], 1, N_EMBD, 0);
    for (r = 0; r < n; ++r)
      for (i = 0; i < N_EMBD; ++i) x[r][i] += proj[r][i];
    tap("resid.attn", l, first, n, &x[0][0], 1, N_EMBD, 0);
    for (r = 0; r < n; ++r) rmsnorm(x[r], norm[r]);
    tap("ffn_norm", l, first, n, &norm[0][0], 1, N_EMBD, 0);
    for (r = 0; r < n; ++r) {
      matvec(10 * l + 4, N_FF, N_EMBD, norm[r], gate[r]);
      matvec(10 * l + 5, N_FF, N_EMBD, norm[r], up[r]);
    }
    tap("ffn_gate", l, first, n, &gate[0][0], 1, N_FF, 0);
    tap("ffn_up", l, first, n, &up[0][0], 1, N_FF, 0);
    for (r = 0; r < n; ++r) {
      for (i = 0; i < N_FF; ++i) gate[r][i] = gate[r][i] / (1.0f + expf(-gate[r][i])) * up[r][i];
    }
    tap("ffn.act", l, first, n, &gate[0][0], 1, N_FF, 0);
    for (r = 0; r < n; ++r) matvec(10 * l + 6, N_EMBD, N_FF, gate[r], proj[r]);
    tap("ffn_down", l, first, n, &proj[0][0], 1, N_EMBD, 0);
    for (r = 0; r < n; ++r)
      for (i = 0; i < N_EMBD; ++i) x[r][i] += proj[r][i];
    tap("resid.ffn", l, first, n, &x[0][0], 1, N_EMBD, 0);
  }
  for (r = 0; r < n; ++r) rmsnorm(x[r], norm[r]);
  tap("output_norm", -1, first, n, &norm[0][0], 1, N_EMBD, 0);
  matvec(99, N_VOCAB, N_EMBD, norm[n - 1], logits[n - 1]);
  tap("output", -1, first + n - 1, 1, &logits[n - 1][0], 1, N_VOCAB, 0); /* last position */
  for (i = 1; i < N_VOCAB; ++i) {
    if (logits[n - 1][i] > logits[n - 1][best]) best = i;
  }
  return best;
}

int main(int argc, char** argv) {
  int32_t tokens[N_CTX] = {5, 17, 3};
  tapdiff_trace_config cfg;
  const tapdiff_hparam hparams[] = {{"arch", TAPDIFF_HPARAM_STRING, 0, 0.0, "toy-llama"},
                                    {"n_layer", TAPDIFF_HPARAM_INT, N_LAYER, 0.0, NULL},
                                    {"rope_freq_base", TAPDIFF_HPARAM_FLOAT, 0, 10000.0, NULL}};
  int step, next;
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: c_engine_tap OUT.h5 [NAME_GLOBS]\n");
    return 2;
  }
  tapdiff_trace_config_init(&cfg);
  cfg.producer = "external";
  cfg.producer_version = "c_engine_tap 1.0";
  cfg.model_path = "toy-llama (built in)";
  cfg.prompt_length = N_PROMPT;
  cfg.tokens = tokens;
  cfg.n_tokens = N_PROMPT;
  cfg.hparams = hparams;
  cfg.n_hparams = sizeof hparams / sizeof hparams[0];
  cfg.dims.n_layer = N_LAYER;
  cfg.dims.n_embd = N_EMBD;
  cfg.dims.n_head = N_HEAD;
  cfg.dims.n_head_kv = N_HEAD_KV;
  cfg.dims.head_dim = HEAD_DIM;
  cfg.dims.n_ff = N_FF;
  cfg.dims.n_vocab = N_VOCAB;
  cfg.dims.n_ctx = N_CTX;
  cfg.filter_names = argc == 3 ? argv[2] : NULL;
  if (tapdiff_trace_open(argv[1], &cfg, &trace) != TAPDIFF_OK) {
    fprintf(stderr, "c_engine_tap: %s\n", tapdiff_last_error());
    return 2;
  }
  next = forward(tokens, 0, N_PROMPT); /* batched prefill */
  if (tapdiff_trace_end_step(trace) != TAPDIFF_OK) failed = 1;
  for (step = 0; step < N_PREDICT && !failed; ++step) {
    const int pos = N_PROMPT + step;
    tokens[pos] = next;
    if (tapdiff_trace_append_tokens(trace, &tokens[pos], 1) != TAPDIFF_OK) failed = 1;
    next = forward(tokens, pos, 1);
    if (tapdiff_trace_end_step(trace) != TAPDIFF_OK) failed = 1;
  }
  if (failed) {
    fprintf(stderr, "c_engine_tap: %s\n", tapdiff_last_error());
    tapdiff_trace_abandon(trace);
    return 2;
  }
  if (tapdiff_trace_close(trace) != TAPDIFF_OK) {
    fprintf(stderr, "c_engine_tap: %s\n", tapdiff_last_error());
    return 2;
  }
  return 0;
}
