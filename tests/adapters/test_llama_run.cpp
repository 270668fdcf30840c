// The llama.cpp backend's two builds: with libllama it loads a model; without it (the sanitizer
// build, TAPDIFF_LLAMA=OFF) it says why and what to install, and refuses to run.
#include <gtest/gtest.h>

#include <stdexcept>

#include "adapters/llama_cpp/llama_run.hpp"
#include "model/error.hpp"

namespace tapdiff::adapters::llama_cpp {
namespace {

TEST(LlamaRun, WithoutLibllamaItSaysWhyAndRefuses) {
  std::string why;
  if (available(&why)) GTEST_SKIP() << "built with libllama (tests/app/test_llama_cpp.py runs it)";
  EXPECT_NE(why.find("built without llama.cpp"), std::string::npos) << why;
  EXPECT_NE(why.find("scripts/bootstrap.sh"), std::string::npos) << why;
  EXPECT_THROW(LlamaRun("model.gguf", LlamaOptions{}, 8), std::invalid_argument);
}

TEST(LlamaRun, WithLibllamaAMissingModelIsAnInputError) {
  if (!available(nullptr)) GTEST_SKIP() << "built without libllama";
  try {
    LlamaRun run("/nonexistent/model.gguf", LlamaOptions{}, 8);
    ADD_FAILURE() << "a missing model was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "/nonexistent/model.gguf");
  }
}

TEST(LlamaRun, BadOptionsNameTheOption) {
  if (!available(nullptr)) GTEST_SKIP() << "built without libllama";
  LlamaOptions o;
  o.kv_type = "q9_9";
  try {
    LlamaRun run("/nonexistent/model.gguf", o, 8);
    ADD_FAILURE() << "kv type q9_9 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--llama-kv-type"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tapdiff::adapters::llama_cpp
