// The SentencePiece tokenizer: stories260K's ids from an independent engine (SOURCES.md),
// byte fallback and round trips on a fixture vocabulary.
#include <filesystem>
#include <gtest/gtest.h>

#include "fixtures/tiny_model.hpp"
#include "model/error.hpp"
#include "model/tokenizer.hpp"

namespace tapdiff {
namespace {

TEST(Tokenizer, Stories260KMatchesLlamaCpp) {
  const std::filesystem::path model =
      std::filesystem::path(TAPDIFF_SOURCE_DIR) / ".." / "shared" / "models" / "stories260K.gguf";
  if (!std::filesystem::exists(model)) GTEST_SKIP() << "no " << model << " (shared models absent)";
  const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(model.string()));
  EXPECT_EQ(t.encode("Once upon a time"), (std::vector<int>{1, 403, 407, 261, 378}));
  const std::vector<int> generated = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                      338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                      265, 282, 295, 433, 426, 385, 328, 432, 358, 394};
  EXPECT_EQ(t.decode(generated),
            ", there was a little girl named Lily. She loved to play outside in the park. One day, she saw");
  std::vector<int> all = {1, 403, 407, 261, 378};
  all.insert(all.end(), generated.begin(), generated.end());
  EXPECT_EQ(t.decode(all).rfind("Once upon a time, there was", 0), 0u);
}

TEST(Tokenizer, FixtureVocabRoundTripsWithByteFallback) {
  const GgufFile f = GgufFile::from_bytes("tok.gguf", build_fixture(FixtureSpec{}).to_bytes());
  const Tokenizer t = Tokenizer::from_gguf(f);
  for (const char* text : {"the cat", "a  b", "Zürich ☕ 東京", "tab\there\nnewline", " leading"}) {
    const auto ids = t.encode(text);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), 1) << "BOS first";
    EXPECT_EQ(t.decode(ids), text);
  }
  // "é" is no piece of the fixture vocabulary: its two UTF-8 bytes become byte tokens.
  const auto ids = t.encode("é");
  ASSERT_EQ(ids.size(), 4u);  // <s> ▁ <0xC3> <0xA9>
  EXPECT_EQ(t.piece(ids[2]), "<0xC3>");
  EXPECT_EQ(t.piece(ids[3]), "<0xA9>");
  // Merges pick the best-scoring pieces: "▁e" exists in the fixture vocabulary.
  const auto e = t.encode("e");
  EXPECT_EQ(t.piece(e.back()), "\xe2\x96\x81" "e");
}

}  // namespace
}  // namespace tapdiff
