#include "engine/kernels/dequant_avx512.hpp"

#include "engine/kernels/decode_avx512.hpp"

namespace tapdiff::engine {

#if TD_DECODE_AVX512

bool dequant_avx512_applies(const DequantArgs& a) {
  return decode_avx512::supported() && a.dst_type == ElemType::f32 && !a.quirks.any();
}

namespace {

template <ElemType kRound>
TD_AVX512 void range_rounded_to(const DequantArgs& a, std::int64_t e0, std::int64_t e1) {
  using namespace decode_avx512;
  const GgmlTypeTraits& traits = ggml_type_traits(a.type);
  const std::int64_t first = a.first + e0;
  RowGroup<1> g;
  g.row[0] = a.src + first / traits.block_elems * std::int64_t(traits.block_bytes);
  g.ahead = kPrefetchAhead;
  float* out = static_cast<float*>(a.dst) + e0;
  const std::int64_t full = (e1 - e0) / 32 * 32;
  decode_rows<1, kRound>(a.type, g, full, [&](int, std::int64_t c, const Halves& w) TD_DECODE_SINK {
    _mm512_storeu_ps(out + c, w.lo);
    _mm512_storeu_ps(out + c + 16, w.hi);
  });
  // A block type's length is whole blocks of 32 or 256; a plain type's may end inside 32.
  if (full < e1 - e0) {
    decode_run(Encoded{a.src, a.type, a.quirks}, first + full, int(e1 - e0 - full), out + full);
    round_run(kRound, out + full, int(e1 - e0 - full));
  }
}

}  // namespace

void dequant_avx512_range(const DequantArgs& a, std::int64_t e0, std::int64_t e1) {
  with_elem_type(a.round, [&](auto round) { range_rounded_to<decltype(round)::value>(a, e0, e1); });
}

#else

bool dequant_avx512_applies(const DequantArgs&) { return false; }
void dequant_avx512_range(const DequantArgs&, std::int64_t, std::int64_t) {}

#endif

}  // namespace tapdiff::engine
