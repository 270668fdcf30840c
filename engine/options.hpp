// The engine's public options (see generate.hpp).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "engine/device/elem_type.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff::engine {

enum class Backend { host, cuda };
// f32, f16, bf16: activations and the KV cache stored in that type and GEMM operands rounded
// to it, float32 accumulation. q8: float32 storage, but a quantized weight multiplies
// activations quantized to 8 bits with integer dot products (kernels/matmul_q8.hpp), as
// llama.cpp's CPU backend does.
enum class Precision { f32, f16, bf16, q8 };

std::string_view backend_name(Backend backend);        // "host", "cuda"
std::string_view precision_name(Precision precision);  // "f32", "f16", "bf16", "q8"
ElemType storage_of(Precision precision);              // what activations are stored as
std::optional<Backend> parse_backend(std::string_view name);
std::optional<Precision> parse_precision(std::string_view name);

struct EngineOptions {
  Backend backend = Backend::host;
  Precision precision = Precision::f32;
  std::string fault;  // "" = none; a name from fault_catalogue(), or several separated by commas
  // Lockstep: a trace (usually the reference's, same model and tokens) every tap point
  // continues from after recording its own value; "" = off. See engine/taps.hpp.
  std::string lockstep;
  int n_predict = 16;
  // Prompt tokens per prefill step: 0 runs the whole prompt as one batch, 1 token by token.
  int prefill_chunk = 0;
  bool logits_all = false;  // the `output` tap at every prompt position, not just the last
  // Record every weight as the engine uses it into the trace before the prefill
  // (tapdiff/weight_taps.hpp); nullopt: no weight taps.
  std::optional<WeightTapOptions> weights;
  // After each forward step: (last position run, token chosen, steps done, steps total).
  std::function<void(int position, int token, int steps_done, int steps_total)> on_step;
};

}  // namespace tapdiff::engine
