// The corpus check: a text (or a token file) in windows through the reference and the engine,
// only the logits recorded, scored as `llama-perplexity --kl-divergence` scores a quantized
// model against its base: each window of W tokens starts with BOS (when the model's tokenizer
// adds one) and its second half is scored, the logits at position j against token j + 1.
// One window's traces exist at a time, so memory is bounded by a window.
#pragma once

#include <string>
#include <vector>

#include "app/harness.hpp"
#include "diff/corpus.hpp"

namespace tapdiff {

struct CorpusOptions {
  std::string file;     // .txt (tokenized with the model's tokenizer) or .tokens (ids)
  int window = 128;     // tokens per window
  int max_windows = 0;  // 0: every whole window of the file
};

// The reference (f32) as expected, `engine` (any backend, with its precision and faults; its
// prompt and trace unused) as actual. The gate is the one of the precision the actual traces
// declare (a llama.cpp trace declares what its arithmetic applies), each limit `given` sets
// replacing its own. Window traces go to dir and are removed after scoring unless keep.
diff::CorpusReport run_corpus(const RunSpec& engine, const CorpusOptions& options, const diff::CorpusGate& given,
                              const std::string& dir, bool keep);

}  // namespace tapdiff
