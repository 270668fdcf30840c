// Reference decode speed on a SmolLM2-135M-shaped fixture (f32) at 1 and 2 threads, against
// the memory-bandwidth bound (weight bytes read per token / measured read bandwidth).
// Writes bench/results/reference.md.
#include <CLI/CLI.hpp>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <omp.h>

#include "bandwidth.hpp"
#include "fixtures/tiny_model.hpp"
#include "machine.hpp"
#include "reference/forward.hpp"

using namespace tapdiff;

int main(int argc, char** argv) {
  CLI::App app{"tapdiff reference decode benchmark"};
  std::string out = "bench/results/reference.md";
  std::string model_path = "build/bench/smollm2-shaped-f32.gguf";
  int n_tokens = 16;
  app.add_option("-o,--out", out, "Results file (Markdown)")->capture_default_str();
  app.add_option("--model", model_path, "Fixture path (generated when absent)")->capture_default_str();
  app.add_option("--tokens", n_tokens, "Decode steps timed per thread count")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (!std::filesystem::exists(model_path)) {
    const FixtureSpec spec = smollm2_135m_shape();
    std::filesystem::create_directories(std::filesystem::path(model_path).parent_path());
    fmt::print(stderr, "generating {}\n", model_path);
    write_fixture(spec, model_path);
  }
  const GgufFile file = GgufFile::open(model_path);
  const ref::Weights w = ref::load_weights(file);
  // Every weight is read once per token (the tied head reads all of token_embd; the
  // embedding lookup itself reads one row, not counted).
  double weight_bytes = 0;
  for (const auto& t : file.tensors()) weight_bytes += double(t.n_elements) * sizeof(float);

  std::string rows;
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    const double bw = bench::read_bandwidth_gbs();
    ref::Forward<float> forward(w, n_tokens + 1, nullptr);
    forward.step(1, 0);  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int p = 1; p <= n_tokens; ++p) forward.step(1 + p, p);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tps = n_tokens / s;
    const double bound = bw * 1e9 / weight_bytes;
    rows += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {:.0f}% |\n", threads, bw, bound, tps,
                        100 * tps / bound);
    fmt::print(stderr, "{} threads: {:.1f} tok/s (bound {:.1f})\n", threads, tps, bound);
  }
  std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  std::ofstream f(out);
  f << "# Reference decode speed\n\n"
    << "Machine: " << bench::machine_description() << "  \n"
    << "Command: `make bench` (runs `build/bench/bench_reference`)  \n"
    << fmt::format("Model: SmolLM2-135M-shaped fixture, f32, {:.0f} MB of weights read per token, "
                   "{} decode steps timed after one warm-up step\n\n",
                   weight_bytes / 1e6, n_tokens)
    << "| threads | read bandwidth GB/s | bound tok/s | reference tok/s | of bound |\n"
    << "|---|---|---|---|---|\n"
    << rows;
  fmt::print("wrote {}\n", out);
  return 0;
}
