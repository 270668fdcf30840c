// Tokenizers from GGUF metadata.
// SentencePiece-style (`tokenizer.ggml.model = llama`): the text with spaces as "▁" and a
// leading "▁", split into characters, pieces merged pairwise by best score (llama.cpp's
// llm_tokenizer_spm), characters no piece covers as <0xNN> bytes.
// Byte-level BPE (`gpt2`): model/bpe_tokenizer.hpp.
// BOS (and EOS) are added as `tokenizer.ggml.add_bos_token` (`add_eos_token`) say; without the
// key, SentencePiece adds BOS and BPE does only for the llama3 pre-tokenizer (as llama.cpp).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/bpe_tokenizer.hpp"
#include "model/gguf.hpp"

namespace tapdiff {

class Tokenizer {
public:
  // Throws InputError naming the file and key for missing or malformed tokenizer metadata.
  static Tokenizer from_gguf(const GgufFile& file);

  std::vector<int> encode(std::string_view text) const;  // with BOS/EOS when the model asks for them
  // The text of `tokens`, less the BOS/EOS that encode() adds. Control tokens: dropped by
  // SentencePiece, written as their text by BPE (so "<|im_start|>" round-trips).
  std::string decode(const std::vector<int>& tokens) const;
  const std::string& piece(int id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  int bos_added() const { return add_bos_ ? bos_ : -1; }  // the BOS encode() starts with; -1: none
  int n_vocab() const { return static_cast<int>(tokens_.size()); }

private:
  int byte_token(unsigned char byte) const;
  void encode_spm(std::string_view text, std::vector<int>& out) const;
  std::string decode_spm(const std::vector<int>& tokens, std::size_t first, std::size_t last) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int> types_;  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
  std::unordered_map<std::string, int> ids_;
  std::optional<BpeTokenizer> bpe_;  // set for byte-level BPE vocabularies
  int bos_ = -1, eos_ = -1;
  bool add_bos_ = true, add_eos_ = false;
  std::string source_;
};

}  // namespace tapdiff
