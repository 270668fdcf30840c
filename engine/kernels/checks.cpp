// Argument checks of every op: the checked entries (Executor) call these before launching,
// so a shape or pointer mistake in the orchestration is an exception, not a wild write.
#include <cmath>
#include <fmt/format.h>

#include "engine/kernels/add.hpp"
#include "engine/kernels/argmax.hpp"
#include "engine/kernels/attention.hpp"
#include "engine/kernels/bias.hpp"
#include "engine/kernels/convert.hpp"
#include "engine/kernels/copy_rows.hpp"
#include "engine/kernels/dequant.hpp"
#include "engine/kernels/embed.hpp"
#include "engine/kernels/kv_append.hpp"
#include "engine/kernels/matmul_q8.hpp"
#include "engine/kernels/matmul_q8k.hpp"
#include "engine/kernels/matvec.hpp"
#include "engine/kernels/moe_combine.hpp"
#include "engine/kernels/moe_route.hpp"
#include "engine/kernels/quantize_q8.hpp"
#include "engine/kernels/rmsnorm.hpp"
#include "engine/kernels/rope.hpp"
#include "engine/kernels/round.hpp"
#include "engine/kernels/silu_mul.hpp"
#include "engine/kernels/scale.hpp"
#include "engine/kernels/softcap.hpp"
#include "engine/require.hpp"

namespace tapdiff::engine {
namespace {

void require_pointers(const char* op, std::int64_t n, std::initializer_list<const void*> ptrs) {
  if (n == 0) return;
  for (const void* p : ptrs) require(p != nullptr, op, "null buffer");
}

}  // namespace

void validate(const DequantArgs& a) {
  const GgmlTypeTraits& traits = ggml_type_traits(a.type);
  require(a.n >= 0 && a.n % traits.block_elems == 0 && a.first >= 0 && a.first % traits.block_elems == 0,
          "dequantize",
          [&] { return fmt::format("elements [{}, {}) of {}: expected whole blocks of {}", a.first, a.first + a.n,
                                   traits.name, traits.block_elems); });
  require_pointers("dequantize", a.n, {a.src, a.dst});
}

void validate(const MatvecArgs& a) {
  const GgmlTypeTraits& traits = ggml_type_traits(a.w.type);
  require(a.cols > 0 && a.cols % traits.block_elems == 0, "matvec",
          [&] { return fmt::format("rows of {} {} elements: expected whole blocks of {}", a.cols, traits.name,
                                   traits.block_elems); });
  require(a.rows >= 0 && a.k >= 0 && a.k <= a.cols, "matvec",
          [&] { return fmt::format("{} rows summing {} of {} columns", a.rows, a.k, a.cols); });
  require_pointers("matvec", a.rows, {a.w.bytes, a.x, a.y});
}

void validate(const QuantizeQ8Args& a) {
  const int block = a.out.block;
  require(block == kQ8Block || block == kQ8KBlock, "quantize_q8",
          [&] { return fmt::format("blocks of {}: expected {} or {}", block, kQ8Block, kQ8KBlock); });
  require(a.n >= 0 && a.k >= 0 && a.k % block == 0 && a.ldx >= a.k, "quantize_q8",
          [&] {
            return fmt::format("{} rows of {} values (ld {}): expected whole blocks of {}", a.n, a.k, a.ldx, block);
          });
  require_pointers("quantize_q8", a.n * a.k,
                   {a.x, a.out.q, a.out.d, block == kQ8Block ? static_cast<const void*>(a.out.ds) : a.out.sums});
}

void validate(const MatmulQ8Args& a) {
  const GgmlTypeTraits& traits = ggml_type_traits(a.w.type);
  require(q8_multipliable(a.w), "matmul_q8",
          [&] { return fmt::format("{} weights: expected a block type with 8-bit integers", traits.name); });
  require(a.cols > 0 && a.cols % traits.block_elems == 0, "matmul_q8",
          [&] { return fmt::format("rows of {} {} elements: expected whole blocks of {}", a.cols, traits.name,
                                   traits.block_elems); });
  require(a.rows >= 0 && a.n >= 0 && a.k >= 0 && a.k <= a.cols && a.k % kQ8Block == 0 && a.ldy >= a.rows,
          "matmul_q8", [&] {
            return fmt::format("{} rows summing {} of {} columns, {} activation rows, ld {}", a.rows, a.k, a.cols,
                               a.n, a.ldy);
          });
  const bool k_blocks = a.x.block == kQ8KBlock;
  require(a.x.block == kQ8Block || (k_blocks && q8k_multipliable(a.w) && a.k % kQ8KBlock == 0), "matmul_q8",
          [&] {
            return fmt::format("{} weights, {} columns, activations in blocks of {}: expected blocks of {}, or of {} "
                               "for Q4_K, Q5_K and Q6_K summing whole blocks",
                               traits.name, a.k, a.x.block, kQ8Block, kQ8KBlock);
          });
  require_pointers("matmul_q8", a.rows * a.n,
                   {a.w.bytes, a.x.q, a.x.d, k_blocks ? static_cast<const void*>(a.x.sums) : a.x.ds, a.y});
}

void validate(const ConvertArgs& a) {
  require(a.n >= 0, "convert", [&] { return fmt::format("n = {}", a.n); });
  require_pointers("convert", a.n, {a.src, a.dst});
}

void validate(const RoundArgs& a) {
  require(a.n >= 0, "round", [&] { return fmt::format("n = {}", a.n); });
  require_pointers("round", a.n, {a.x});
}

void validate(const EmbedArgs& a) {
  const GgmlTypeTraits& traits = ggml_type_traits(a.table.type);
  require(a.n_rows >= 0 && a.n_embd > 0 && a.n_vocab > 0 && a.n_embd % traits.block_elems == 0, "embed",
          [&] {
            return fmt::format("shape rows {} embd {} vocab {} of {}", a.n_rows, a.n_embd, a.n_vocab, traits.name);
          });
  require_pointers("embed", a.n_rows, {a.table.bytes, a.tokens, a.out});
}

void validate(const RmsNormArgs& a) {
  require(a.n_rows >= 0 && a.n > 0, "rmsnorm", [&] { return fmt::format("shape ({}, {})", a.n_rows, a.n); });
  require_pointers("rmsnorm", a.n_rows, {a.x, a.out});
}

void validate(const BiasArgs& a) {
  require(a.n_rows >= 0 && a.n > 0, "bias", [&] { return fmt::format("shape ({}, {})", a.n_rows, a.n); });
  require_pointers("bias", a.n_rows, {a.x, a.bias});
}

void validate(const RopeArgs& a) {
  require(a.n_rows >= 0 && a.n_heads > 0 && a.head_dim > 0, "rope",
          [&] { return fmt::format("shape ({}, {}, {})", a.n_rows, a.n_heads, a.head_dim); });
  require(a.n_rot >= 2 && a.n_rot % 2 == 0 && a.n_rot <= a.head_dim, "rope",
          [&] { return fmt::format("n_rot {}: expected even, in [2, head_dim {}]", a.n_rot, a.head_dim); });
  require(a.base > 0, "rope", [&] { return fmt::format("base {}", a.base); });
  // A tiny original context puts corr_high below corr_low; the ramp's max(0.001, high - low) takes
  // that as llama.cpp does.
  require(std::isfinite(a.freq_scale) && a.freq_scale > 0 && std::isfinite(a.mscale) && std::isfinite(a.corr_low) &&
              std::isfinite(a.corr_high),
          "rope", [&] {
            return fmt::format("scaling: freq_scale {}, mscale {}, correction dims [{}, {}]", a.freq_scale, a.mscale,
                               a.corr_low, a.corr_high);
          });
  require_pointers("rope", a.n_rows, {a.x, a.positions});
}

void validate(const KvAppendArgs& a) {
  require(a.n_rows >= 0 && a.row > 0, "kv_append", [&] { return fmt::format("shape ({}, {})", a.n_rows, a.row); });
  require(a.offset >= 0 && a.offset + a.n_rows * a.row <= a.capacity * a.row, "kv_append",
          [&] { return fmt::format("elements [{}, {}) outside the cache's {} rows of {}", a.offset,
                                   a.offset + a.n_rows * a.row, a.capacity, a.row); });
  require_pointers("kv_append", a.n_rows, {a.src, a.cache});
}

void validate(const AttentionArgs& a) {
  require(a.n_rows >= 0 && a.n_head > 0 && a.n_head_kv > 0 && a.head_dim > 0 &&
              a.n_head % a.n_head_kv == 0,
          "attention",
          [&] { return fmt::format("shape rows {} heads {} kv heads {} head_dim {}", a.n_rows, a.n_head,
                                   a.n_head_kv, a.head_dim); });
  require(a.n_keys >= 1 && a.n_keys <= a.probs_stride, "attention",
          [&] { return fmt::format("n_keys {}: expected in [1, capacity {}]", a.n_keys, a.probs_stride); });
  require(a.temp_scale == 0.0f || a.temp_floor >= 1.0f, "attention",
          [&] { return fmt::format("temperature floor {}: expected >= 1", a.temp_floor); });
  require_pointers("attention", a.n_rows, {a.q, a.k_cache, a.v_cache, a.positions, a.probs, a.out});
}

void validate(const SiluMulArgs& a) {
  require(a.n >= 0, "silu_mul", [&] { return fmt::format("n = {}", a.n); });
  require_pointers("silu_mul", a.n, {a.gate, a.up, a.out});
}

void validate(const AddArgs& a) {
  require(a.n >= 0 && std::isfinite(a.scale), "add", [&] { return fmt::format("n = {}, scale = {}", a.n, a.scale); });
  require_pointers("add", a.n, {a.x, a.y});
}

void validate(const MoeRouteArgs& a) {
  require(a.n_rows >= 0 && a.n_used >= 1 && a.n_used <= a.n_expert, "moe_route", [&] {
    return fmt::format("{} rows, {} of {} experts", a.n_rows, a.n_used, a.n_expert);
  });
  require_pointers("moe_route", a.n_rows, {a.logits, a.routing});
}

void validate(const MoeSelectArgs& a) {
  require(a.n_rows >= 0 && a.n_used >= 1 && a.n_used <= a.n_expert, "moe_select", [&] {
    return fmt::format("{} rows, {} of {} experts", a.n_rows, a.n_used, a.n_expert);
  });
  require_pointers("moe_select", a.n_rows, {a.routing, a.experts, a.weights});
}

void validate(const MoeCombineArgs& a) {
  require(a.n_rows >= 0 && a.n_used >= 1 && a.width >= 1, "moe_combine", [&] {
    return fmt::format("{} rows of {} experts, width {}", a.n_rows, a.n_used, a.width);
  });
  require_pointers("moe_combine", a.n_rows, {a.rows, a.weights, a.out});
}

void validate(const CopyRowsArgs& a) {
  require(a.n_rows >= 0 && a.width >= 1, "copy_rows",
          [&] { return fmt::format("{} rows of width {}", a.n_rows, a.width); });
  require_pointers("copy_rows", a.n_rows, {a.src, a.dst});
}

void validate(const SoftcapArgs& a) {
  require(a.n >= 0 && a.cap > 0, "softcap", [&] { return fmt::format("n = {}, cap = {}", a.n, a.cap); });
  require_pointers("softcap", a.n, {a.x});
}

void validate(const ScaleArgs& a) {
  require(a.n >= 0 && std::isfinite(a.factor), "scale", [&] { return fmt::format("n = {}, factor = {}", a.n, a.factor); });
  require_pointers("scale", a.n, {a.x});
}

void validate(const ArgmaxArgs& a) {
  require(a.n_rows >= 0 && a.n > 0, "argmax", [&] { return fmt::format("shape ({}, {})", a.n_rows, a.n); });
  require_pointers("argmax", a.n_rows, {a.x, a.out});
}

}  // namespace tapdiff::engine
