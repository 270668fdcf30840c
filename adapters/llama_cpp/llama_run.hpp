// `tapdiff run --backend llama.cpp`: a GGUF run through libllama (from the pinned
// llama-cpp-python package), its graph nodes recorded as catalogue taps through the
// scheduler's eval callback (node_map.hpp says which node is which tap).
//
// Two implementations behind this header: llama_run.cpp where CMake found libllama, and
// llama_unavailable.cpp, which says why not, where it did not.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tapdiff/tap_dims.hpp"

namespace tapdiff {
class TraceWriter;
struct TraceMetadata;
}  // namespace tapdiff

namespace tapdiff::adapters::llama_cpp {

// false with the reason when this tapdiff was built without libllama.
bool available(std::string* why);

struct LlamaOptions {
  std::string kv_type = "f16";          // K and V cache type: f32, f16, bf16, q8_0, q4_0, ...
  bool flash_attn = false;
  std::vector<std::string> overrides;   // KEY=TYPE:VALUE, TYPE int|float|bool|str (llama.cpp's --override-kv)
  int threads = 0;                      // 0: every hardware thread
};

// Called after every forward step: tokens done, tokens in all, the last token.
using StepCallback = std::function<void(int done, int total, int token)>;

class LlamaRun {
public:
  // Loads the model and makes a context for n_ctx positions. Throws InputError (the model,
  // with llama.cpp's own message) or std::invalid_argument (an option).
  LlamaRun(const std::string& model_path, const LlamaOptions& options, int n_ctx);
  ~LlamaRun();
  LlamaRun(const LlamaRun&) = delete;
  LlamaRun& operator=(const LlamaRun&) = delete;

  // What a trace records about this run: precision (the coarsest arithmetic llama.cpp applies:
  // f32, f16, bf16 or q8 for 8-bit activations), producer version and settings, the taps
  // llama.cpp has no node for.
  void describe(TraceMetadata& metadata) const;

  // Greedy generation: the prompt in one batch, then one token per step; the last generated
  // token is not fed back. logits_all: the `output` tap at every prompt position.
  // dims: the trace's (row shapes of the taps, n_ctx the width of attn.probs).
  std::vector<int> generate(const std::vector<int>& prompt, int n_predict, const TapDims& dims, bool logits_all,
                            TraceWriter* trace, const StepCallback& on_step = {});

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapdiff::adapters::llama_cpp
