// bench_matmul: the decode product of one 4096 x 4096 matrix (a Llama-2-7B projection) on the
// host executor, per weight encoding: matvec (float32 activations) against quantize_q8 +
// matmul_q8 (precision q8), and a batch of --batch rows (16) through matmul_q8. Best of --reps, in billions
// of weights a second. Writes bench/results/matmul.md.
#include <algorithm>
#include <chrono>
#include <fmt/format.h>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/executor.hpp"
#include "machine.hpp"
#include "model/quantize.hpp"

namespace {

using namespace tapdiff;
using namespace tapdiff::engine;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kRows = 4096, kCols = 4096;

std::vector<float> values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed;
  for (float& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = float((s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
  }
  return v;
}

template <typename F>
double best_seconds(int reps, const F& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const Clock::time_point t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int reps = 20;
    std::int64_t batch = 16;
    std::string out = std::string(TAPDIFF_SOURCE_DIR) + "/bench/results/matmul.md";
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string arg = argv[i];
      if (arg == "--reps") reps = std::stoi(argv[i + 1]);
      else if (arg == "--out") out = argv[i + 1];
      else if (arg == "--batch") batch = std::stoll(argv[i + 1]);
      else throw std::invalid_argument("unknown argument " + arg);
    }
    if (batch < 2) throw std::invalid_argument("--batch: expected 2 or more rows");
    auto ex = make_host_executor();
    const std::vector<float> w = values(std::size_t(kRows * kCols), 1), x = values(std::size_t(batch * kCols), 2);
    std::vector<float> y(std::size_t(batch * kRows));
    std::vector<std::int8_t> q(std::size_t(batch * kCols));
    std::vector<float> d(std::size_t(batch * kCols / kQ8Block)), ds(d.size());
    std::vector<std::int16_t> sums(d.size());
    std::string md = fmt::format(
        "# Decode product of a {} x {} matrix, host executor\n\nMachine: {}; load average before the run: {}  \n"
        "Command: `OMP_NUM_THREADS=2 build/bench/bench_matmul{}` ({}; best of {}). Billions of weights a second (in a batch: times its rows).\n\n"
        "| encoding | matvec (f32 activations) | q8: quantize + matmul_q8 | q8, {} rows |\n|---|---|---|---|\n",
        kRows, kCols, bench::machine_description(), bench::load_average(), batch == 16 ? "" : fmt::format(" --batch {}", batch),
        ex->describe(), reps, batch);
    for (const GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q5_K,
                                GgmlType::Q6_K}) {
      const std::vector<std::uint8_t> bytes = quantize(type, w);
      const Encoded e{bytes.data(), type, {}};
      const Q8Rows xq{q.data(), d.data(), ds.data(), sums.data(), q8_activation_block(e, kCols)};
      const double weights = double(kRows * kCols);
      const double f32 = best_seconds(reps, [&] { ex->matvec(MatvecArgs{e, kCols, kRows, kCols, x.data(), y.data()}); });
      auto q8 = [&](std::int64_t n) {
        return best_seconds(reps, [&] {
          ex->quantize_q8(QuantizeQ8Args{x.data(), kCols, n, kCols, xq});
          ex->matmul_q8(MatmulQ8Args{e, kCols, kRows, kCols, xq, n, y.data(), kRows});
        });
      };
      const double one = q8(1), many = q8(batch);
      md += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} |\n", ggml_type_name(type), weights / f32 / 1e9,
                        weights / one / 1e9, weights * double(batch) / many / 1e9);
    }
    std::ofstream(out) << md;
    fmt::print("wrote {}\n", out);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_matmul: {}\n", e.what());
    return 2;
  }
}
