// Byte-level BPE (`tokenizer.ggml.model = gpt2`): special tokens (CONTROL and USER_DEFINED)
// are matched in the text first, leftmost-longest; the text between them is split into words
// by the pre-tokenizer `tokenizer.ggml.pre` names (model/pretokenize.hpp); each word's bytes
// become GPT-2's byte symbols (model/bpe_bytes.hpp) and adjacent symbols merge pairwise,
// lowest `tokenizer.ggml.merges` rank first, leftmost on ties (llama.cpp's llm_tokenizer_bpe,
// Hugging Face's BPE).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf.hpp"
#include "model/pretokenize.hpp"

namespace tapdiff {

class BpeTokenizer {
public:
  using Ids = std::unordered_map<std::string, int>;

  // `tokens` and `types` are the file's vocabulary (tokenizer.ggml.tokens, .token_type).
  // Throws InputError naming the file and key for bad merges or an unknown pre-tokenizer.
  static BpeTokenizer from_gguf(const GgufFile& file, const std::vector<std::string>& tokens,
                                const std::vector<int>& types);

  // The ids of `text` (no BOS/EOS); `ids` maps the vocabulary's pieces to ids.
  std::vector<int> encode(std::string_view text, const Ids& ids) const;
  // The bytes `piece` (of a token of type `type`) stands for.
  static std::string decode_piece(const std::string& piece, int type);

  PreTokenizer pre_tokenizer() const { return pre_; }
  // llama.cpp's default for tokenizer.ggml.add_bos_token under this pre-tokenizer.
  bool adds_bos_by_default() const { return pre_ == PreTokenizer::llama3; }

private:
  void encode_word(std::string_view word, const Ids& ids, std::vector<int>& out) const;
  void encode_plain(std::string_view text, const Ids& ids, std::vector<int>& out) const;

  struct Special {
    std::string text;
    int id;
  };
  PreTokenizer pre_ = PreTokenizer::gpt2;
  bool ignore_merges_ = false;  // a word that is itself a token is not merged (llama3)
  std::unordered_map<std::string, int> ranks_;  // "left right" -> merge rank
  std::vector<Special> specials_;               // longest first
  std::string source_;
};

}  // namespace tapdiff
