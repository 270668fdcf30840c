// Tokenizers from GGUF metadata. SentencePiece-style (`tokenizer.ggml.model = llama`): the
// text with spaces as "▁" and a leading "▁", split into characters, pieces merged pairwise
// by best score (llama.cpp's llm_tokenizer_spm), characters no piece covers as <0xNN> bytes.
// Byte-level BPE (`gpt2`) is not implemented yet: from_gguf says so.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf.hpp"

namespace tapdiff {

class Tokenizer {
public:
  // Throws InputError naming the file and key for missing or malformed tokenizer metadata.
  static Tokenizer from_gguf(const GgufFile& file);

  std::vector<int> encode(std::string_view text) const;  // with BOS when the model asks for it
  std::string decode(const std::vector<int>& tokens) const;
  const std::string& piece(int id) const { return tokens_.at(static_cast<std::size_t>(id)); }
  int n_vocab() const { return static_cast<int>(tokens_.size()); }

private:
  int byte_token(unsigned char byte) const;

  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<int> types_;  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte
  std::unordered_map<std::string, int> ids_;
  int bos_ = -1;
  bool add_bos_ = true;
  std::string source_;
};

}  // namespace tapdiff
