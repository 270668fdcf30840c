// The pre-tokenizers of byte-level BPE models, chosen by `tokenizer.ggml.pre`: the text is
// split into words before merges run, each with llama.cpp's regexes for that name (the
// regexes are matched by hand here, one matcher per regex; see pretokenize.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tapdiff {

enum class PreTokenizer {
  llama_default,  // "default" or no key: llama.cpp's fallback (punctuation, gpt2, digit runs, 3 digits)
  gpt2,           // "gpt2", "gpt-2": GPT-2's regex
  smollm,         // every digit alone, then GPT-2's regex
  qwen2,          // the llama3 regex with one digit per word
  llama3,         // "llama-bpe", "llama3", "llama-v3": up to three digits per word
};

// nullopt for a name not listed above.
std::optional<PreTokenizer> pre_tokenizer_named(std::string_view name);
const char* supported_pre_tokenizers();  // for error messages

// The words of `text`, in order; they concatenate to `text`.
std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer pre);

}  // namespace tapdiff
