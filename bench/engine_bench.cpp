// bench_engine: an executor's prefill and decode throughput on a SmolLM2-135M-shaped fixture
// (llama, 30 layers, n_embd 576, 9 heads, 3 kv heads, n_ff 1536, vocab 49152, tied output,
// weights of one type, F32 by default): pp128 = one batched prefill of 128 tokens, tg64 = 64
// decode steps after a 1-token prefill (llama-bench's definitions). Weight loading is not
// timed. Writes a Markdown table with the machine and the exact command.
//
//   bench_engine [--backend host|cuda] [--type F32|Q8_0|Q4_K|...] [--threads N] [--reps N] [--out PATH]
#include <cblas.h>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>
#include <fstream>
#include <omp.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/utsname.h>
#include <thread>
#include <vector>

#include "app/git_commit.hpp"
#include "engine/executor.hpp"
#include "engine/forward.hpp"
#include "engine/weights.hpp"
#include "fixtures/tiny_model.hpp"
#include "model/config.hpp"

namespace {

using namespace tapdiff;
using namespace tapdiff::engine;
using Clock = std::chrono::steady_clock;

struct Options {
  Backend backend = Backend::host;
  GgmlType type = GgmlType::F32;
  int threads = 2;
  int reps = 5;
  std::string out = std::string(TAPDIFF_SOURCE_DIR) + "/bench/results/engine.md";
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(fmt::format("{}: expected a value", arg));
    if (arg == "--backend") {
      const auto b = parse_backend(argv[++i]);
      if (!b) throw std::invalid_argument(fmt::format("--backend {}: expected host or cuda", argv[i]));
      o.backend = *b;
    } else if (arg == "--type") {
      const auto t = ggml_type_from_name(argv[++i]);
      if (!t) throw std::invalid_argument(fmt::format("--type {}: expected a GGUF tensor type such as F32, Q8_0 or Q4_K", argv[i]));
      o.type = *t;
    } else if (arg == "--threads")
      o.threads = std::stoi(argv[++i]);
    else if (arg == "--reps")
      o.reps = std::stoi(argv[++i]);
    else if (arg == "--out")
      o.out = argv[++i];
    else
      throw std::invalid_argument(fmt::format("unknown argument {}", arg));
  }
  if (o.threads < 1 || o.reps < 1)
    throw std::invalid_argument("--threads and --reps: expected >= 1");
  return o;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Result {
  std::string precision;
  double load_s = 0;
  std::vector<double> pp, tg;  // tokens/s per repetition
};

std::vector<int> prompt_tokens(int n, int n_vocab) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (1 + 7919 * i) % n_vocab;
  return t;
}

Result run(Executor& ex, const GgufFile& model, const ModelConfig& c, Precision precision, int reps) {
  constexpr int kPrompt = 128, kDecode = 64;
  Result r;
  r.precision = std::string(precision_name(precision));
  const Clock::time_point t_load = Clock::now();
  const EngineWeights w = load_engine_weights(ex, model, c, FaultSwitch{});
  r.load_s = seconds_since(t_load);
  const std::vector<int> prompt = prompt_tokens(kPrompt, c.n_vocab);
  for (int rep = 0; rep < reps; ++rep) {
    Forward prefill(ex, w, c, kPrompt + 1, kPrompt, precision, FaultSwitch{}, nullptr);
    const Clock::time_point t0 = Clock::now();
    prefill.step(prompt.data(), kPrompt, 0);
    r.pp.push_back(kPrompt / seconds_since(t0));

    Forward decode(ex, w, c, 1 + kDecode, 1, precision, FaultSwitch{}, nullptr);
    int token = decode.step(prompt.data(), 1, 0);
    const Clock::time_point t1 = Clock::now();
    for (int i = 0; i < kDecode; ++i) token = decode.step(&token, 1, 1 + i);
    r.tg.push_back(kDecode / seconds_since(t1));
  }
  return r;
}

std::string mean_sd(const std::vector<double>& v) {
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  const double sd = v.size() > 1 ? std::sqrt(var / double(v.size() - 1)) : 0.0;
  return fmt::format("{:.2f} ± {:.2f}", mean, sd);
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string memory_total() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  long kb = 0;
  in >> key >> kb >> unit;
  return fmt::format("{:.1f} GiB", double(kb) / (1024.0 * 1024.0));
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return fmt::format("{} {} {}", a, b, c);
}

std::string wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr ? policy : "unset (libgomp default: spin, then sleep)";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    omp_set_num_threads(o.threads);
    std::string command =
        std::getenv("OMP_WAIT_POLICY") != nullptr
            ? std::string("OMP_WAIT_POLICY=") + std::getenv("OMP_WAIT_POLICY") + " "
            : std::string();
    command += argv[0];
    for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];

    const Clock::time_point t_fixture = Clock::now();
    FixtureSpec spec = smollm2_135m_shape();
    spec.weight_type = o.type;
    const GgufFile model = GgufFile::from_bytes("smollm2-135m-shape.gguf", build_fixture(spec).to_bytes());
    const double fixture_s = seconds_since(t_fixture);
    const ModelConfig c = load_model_config(model);
    const std::string load_before = load_average();

    const auto executor = make_executor(o.backend);
    std::vector<Result> results;
    for (Precision p : {Precision::f32, Precision::f16, Precision::q8})
      results.push_back(run(*executor, model, c, p, o.reps));

    struct utsname u {};
    uname(&u);
    std::ostringstream md;
    md << "# Engine benchmark: " << backend_name(o.backend) << " executor\n\n"
       << "Prefill (pp128: one batched step of 128 prompt tokens) and decode (tg64: 64 one-token "
          "steps after a 1-token prefill) on a SmolLM2-135M-shaped fixture: llama, 30 layers, "
          "n_embd 576, 9 heads / 3 kv heads, n_ff 1536, vocab 49152, tied output, "
       << ggml_type_name(o.type) << " weights (random, generated by fixtures/), on the "
       << executor->describe() << ". Weight loading is not timed. "
          "Tokens/s "
          "as mean ± sd over "
       << o.reps << " repetitions.\n\n"
       << "| precision | pp128 tok/s | tg64 tok/s | weight load s |\n|---|---|---|---|\n";
    for (const Result& r : results)
      md << fmt::format("| {} | {} | {} | {:.2f} |\n", r.precision, mean_sd(r.pp), mean_sd(r.tg),
                        r.load_s);
    md << "\n## Machine and command\n\n"
       << "- CPU: " << cpu_model() << ", " << std::thread::hardware_concurrency()
       << " hardware threads; memory " << memory_total() << "\n"
       << "- OS: " << u.sysname << " " << u.release << " " << u.machine << "\n"
       << "- threads: " << o.threads
       << " OpenMP threads run the host kernels and the GEMM row "
          "slices (each slice one single-threaded OpenBLAS call); "
       << openblas_get_config() << "\n"
       << "- OMP_WAIT_POLICY: " << wait_policy()
       << " (passive: waiting OpenMP threads sleep instead of spinning; see docs/engine.md, "
          "Threads)\n"
       << "- load average before the runs: " << load_before
       << " (other work on the machine slows the run)\n"
       << "- git commit: " << git_commit() << "\n"
       << fmt::format("- fixture generation (not timed above): {:.1f} s\n", fixture_s)
       << "- command: `" << command << "`\n";
    std::ofstream out(o.out);
    if (!out) throw std::runtime_error("cannot write " + o.out);
    out << md.str();
    fmt::print("{}\nwritten to {}\n", md.str(), o.out);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_engine: {}\n", e.what());
    return 2;
  }
}
