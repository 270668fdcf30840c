#include "sgemm_probe.hpp"

#include <algorithm>
#include <cblas.h>
#include <chrono>
#include <omp.h>

#include "engine/gemm/gemm.hpp"

namespace tapdiff::bench {

std::vector<GemmShape> prefill_gemms(const ModelConfig& c, int n_tokens) {
  const int E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, L = c.n_layer;
  return {{Q, n_tokens, E, L},      {KV, n_tokens, E, 2 * L}, {E, n_tokens, Q, L},
          {F, n_tokens, E, 2 * L},  {E, n_tokens, F, L},      {c.n_vocab, 1, E, 1}};
}

double gemm_flops(const std::vector<GemmShape>& shapes) {
  double flops = 0;
  for (const GemmShape& s : shapes) flops += 2.0 * s.m * s.n * s.k * s.count;
  return flops;
}

namespace {

// Every GEMM's operands: distinct weights, one input and one output per shape.
struct Gemms {
  struct Operands {
    GemmShape shape;
    std::vector<std::vector<float>> weights;
    std::vector<float> b, c;
  };
  std::vector<Operands> ops;
  explicit Gemms(const std::vector<GemmShape>& shapes) {
    for (const GemmShape& s : shapes) {
      Operands o{s, {}, std::vector<float>(std::size_t(s.k) * s.n, 0.5f), std::vector<float>(std::size_t(s.m) * s.n)};
      for (int i = 0; i < s.count; ++i) o.weights.emplace_back(std::size_t(s.k) * s.m, 0.25f);
      ops.push_back(std::move(o));
    }
  }
  // gemm(shape, w, b, c) for every weight, best of `reps` passes.
  template <typename Gemm>
  double best_pass(int reps, Gemm gemm) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (Operands& o : ops)
        for (const std::vector<float>& w : o.weights) gemm(o.shape, w.data(), o.b.data(), o.c.data());
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return best;
  }
};

// fn(i0, i1) on one slice of rows [0, m) per OpenMP thread.
template <typename Fn>
void row_slices(int m, Fn fn) {
  const int parts = omp_get_max_threads(), rows = (m + parts - 1) / parts;
#pragma omp parallel for schedule(static)
  for (int p = 0; p < parts; ++p) {
    const int i0 = std::min(m, p * rows), i1 = std::min(m, i0 + rows);
    if (i0 < i1) fn(i0, i1);
  }
}

}  // namespace

double time_sgemm(const std::vector<GemmShape>& shapes, int reps) {
  openblas_set_num_threads(1);
  Gemms gemms(shapes);
  return gemms.best_pass(reps, [](const GemmShape& s, const float* w, const float* b, float* c) {
    row_slices(s.m, [&](int i0, int i1) {
      cblas_sgemm(CblasColMajor, CblasTrans, CblasNoTrans, i1 - i0, s.n, s.k, 1.0f, w + std::int64_t(i0) * s.k, s.k, b,
                  s.k, 0.0f, c + i0, s.m);
    });
  });
}

double time_gemm_host(const std::vector<GemmShape>& shapes, int reps) {
  openblas_set_num_threads(1);  // as the host executor runs it
  Gemms gemms(shapes);
  return gemms.best_pass(reps, [](const GemmShape& s, const float* w, const float* b, float* c) {
    engine::GemmArgs g;
    g.op_a = engine::GemmOp::T;
    g.m = s.m, g.n = s.n, g.k = s.k;
    g.a = w, g.lda = s.k, g.b = b, g.ldb = s.k, g.c = c, g.ldc = s.m;
    engine::gemm_host(g);
  });
}

double time_decode_sgemv_all_split(const ModelConfig& c, int reps) {
  openblas_set_num_threads(1);
  Gemms gemvs(prefill_gemms(c, 1));
  return gemvs.best_pass(reps, [](const GemmShape& s, const float* w, const float* x, float* y) {
    row_slices(s.m, [&](int i0, int i1) {
      cblas_sgemv(CblasColMajor, CblasTrans, s.k, i1 - i0, 1.0f, w + std::int64_t(i0) * s.k, s.k, x, 1, 0.0f, y + i0,
                  1);
    });
  });
}

}  // namespace tapdiff::bench
