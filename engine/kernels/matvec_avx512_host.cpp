#include "engine/kernels/matvec_avx512.hpp"

#include "engine/kernels/decode_avx512.hpp"

namespace tapdiff::engine {

#if TD_DECODE_AVX512
namespace {

using namespace decode_avx512;

// Rows [r, r + R) of `a`: their sums, then each row's tail and slots as matvec_row adds them,
// every weight rounded to kRound (a.round) first.
template <int R, ElemType kRound>
TD_AVX512 __attribute__((noinline)) void matvec_row_group(const MatvecArgs& a, std::int64_t row_bytes, std::int64_t r) {
  const std::int64_t full = a.k / kMatvecSlots * kMatvecSlots;
  const std::int64_t group_bytes = R * row_bytes;
  RowGroup<R> g;
  g.ahead = (kPrefetchAhead + group_bytes - 1) / group_bytes * group_bytes;
  Halves acc[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    g.row[i] = a.w.bytes + (r + i) * row_bytes;
    acc[i] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  }
  // Each row's products add into matvec_row's slots: lane s of the low half is slot s, of the
  // high half slot 16 + s.
  const float* x = a.x;
  decode_rows<R, kRound>(a.w.type, g, full, [&](int i, std::int64_t c, const Halves& w) TD_DECODE_SINK {
    acc[i].lo = _mm512_fmadd_ps(w.lo, _mm512_loadu_ps(x + c), acc[i].lo);
    acc[i].hi = _mm512_fmadd_ps(w.hi, _mm512_loadu_ps(x + c + 16), acc[i].hi);
  });
  const bool blocks = ggml_type_traits(a.w.type).block_elems > 1;
  for (int i = 0; i < R; ++i) {
    // The columns after the last whole 32 add in order into the tail, as matvec_row's do: a
    // block type's are the start of one sub-block, a plain type's exactly what is left.
    float tail = 0.0f;
    if (full < a.k) {
      float w[kDecodeRun];
      if (blocks) decode_sub_block(a.w, (r + i) * a.cols + full, w);
      else decode_run(a.w, (r + i) * a.cols + full, int(a.k - full), w);
      round_run(kRound, w, int(a.k - full));
      for (std::int64_t c = full; c < a.k; ++c) tail = product_add(tail, w[c - full], a.x[c]);
    }
    float slots[kMatvecSlots];
    _mm512_storeu_ps(slots, acc[i].lo);
    _mm512_storeu_ps(slots + 16, acc[i].hi);
    a.y[r + i] = sum_slots(tail, slots);
  }
}

// Rows a group: on the machine measured 4 and 8 were alike, 1 and 2 slower (legacy encodings).
constexpr int kRowGroup = 4;

template <ElemType kRound>
void rows_rounded_to(const MatvecArgs& a, std::int64_t r0, std::int64_t r1) {
  const GgmlTypeTraits& traits = ggml_type_traits(a.w.type);
  const std::int64_t row_bytes = a.cols / traits.block_elems * std::int64_t(traits.block_bytes);
  std::int64_t r = r0;
  for (; r + kRowGroup <= r1; r += kRowGroup) matvec_row_group<kRowGroup, kRound>(a, row_bytes, r);
  for (; r < r1; ++r) matvec_row_group<1, kRound>(a, row_bytes, r);
}

}  // namespace

bool matvec_avx512_applies(const MatvecArgs& a) { return supported() && !a.w.quirks.any(); }

void matvec_avx512_rows(const MatvecArgs& a, std::int64_t r0, std::int64_t r1) {
  with_elem_type(a.round, [&](auto round) { rows_rounded_to<decltype(round)::value>(a, r0, r1); });
}

#else

bool matvec_avx512_applies(const MatvecArgs&) { return false; }
void matvec_avx512_rows(const MatvecArgs&, std::int64_t, std::int64_t) {}

#endif

}  // namespace tapdiff::engine
