// bench_models: SmolLM2-135M-Instruct, side by side in one run on `--threads` threads:
//   - the memory read bandwidth probe, and the decode bound it gives (weight bytes read per
//     token / bandwidth; both programs hold every weight as float32 on the host, so a token
//     reads n_params × 4 bytes whatever the file's type);
//   - reference decode tok/s, on the Q4_1 original and on an F32 copy written by tapdiff's own
//     GGUF writer;
//   - host engine prefill (pp128) and decode (tg64) at f32 and f16 on both files; prefill as
//     GEMM GFLOP/s against OpenBLAS SGEMM on the same GEMMs in the same run;
//   - tracing cost: a 64-token prompt + 64 generated tokens with every tap on vs none, in this
//     process and as `tapdiff run` processes (also with the trace's data writes discarded), the
//     trace bytes per token, the model hash a file's first traced run adds and the trace's
//     bytes written alone, and by a thread beside an untraced run; then
//     `tapdiff diff`'s throughput on those traces against a raw HDF5 read of the same files.
// Writes a Markdown table with the machine and the exact command.
//
//   bench_models [--model Q4_1.gguf] [--f32 PATH] [--threads N] [--reps N] [--trace-rounds N] [--work DIR]
//                [--out PATH]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <omp.h>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include "app/harness.hpp"
#include "bandwidth.hpp"
#include "diff/compare.hpp"
#include "engine/executor.hpp"
#include "engine/forward.hpp"
#include "engine/weights.hpp"
#include "f32_copy.hpp"
#include "hdf5_read.hpp"
#include "machine.hpp"
#include "stats.hpp"
#include "model/mapped_file.hpp"
#include "model/sha256.hpp"
#include "model/config.hpp"
#include "reference/forward.hpp"
#include "sgemm_probe.hpp"

namespace {

using namespace tapdiff;
using Clock = std::chrono::steady_clock;

constexpr int kPrefill = 128, kDecode = 64, kRefDecode = 16, kTracePrompt = 64, kTraceGenerated = 64;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int> prompt_tokens(int n, int n_vocab) {
  std::vector<int> t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = (1 + 7919 * i) % n_vocab;
  return t;
}

double best(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// Reference decode: kRefDecode one-token steps after one warm-up step, best of reps.
double reference_decode_tps(const GgufFile& file, int reps) {
  const ref::Weights w = ref::load_weights(file);
  std::vector<double> tps;
  for (int r = 0; r < reps; ++r) {
    ref::Forward<float> forward(w, kRefDecode + 1, nullptr);
    forward.step(1, 0);
    const auto t0 = Clock::now();
    for (int p = 1; p <= kRefDecode; ++p) forward.step(1 + p, p);
    tps.push_back(kRefDecode / seconds_since(t0));
  }
  return best(tps);
}

struct EngineSpeed {
  double pp = 0, tg = 0;  // tokens/s, best of reps
};

// llama-bench's definitions: pp128 = one batched prefill step of 128 tokens; tg64 = 64 decode
// steps after a 1-token prefill. Weight loading is not timed.
EngineSpeed engine_speed(const GgufFile& file, const ModelConfig& c, engine::Precision precision, int reps) {
  auto ex = engine::make_host_executor();
  const engine::EngineWeights w = engine::load_engine_weights(*ex, file, c, engine::FaultSwitch{});
  const std::vector<int> prompt = prompt_tokens(kPrefill, c.n_vocab);
  std::vector<double> pp, tg;
  for (int r = 0; r < reps; ++r) {
    engine::Forward prefill(*ex, w, c, kPrefill + 1, kPrefill, precision, engine::FaultSwitch{}, nullptr);
    const auto t0 = Clock::now();
    prefill.step(prompt.data(), kPrefill, 0);
    pp.push_back(kPrefill / seconds_since(t0));

    engine::Forward decode(*ex, w, c, 1 + kDecode, 1, precision, engine::FaultSwitch{}, nullptr);
    int token = decode.step(prompt.data(), 1, 0);
    const auto t1 = Clock::now();
    for (int i = 0; i < kDecode; ++i) token = decode.step(&token, 1, 1 + i);
    tg.push_back(kDecode / seconds_since(t1));
  }
  return {best(pp), best(tg)};
}

// One whole `tapdiff run` (load, prefill, decode, close) with every tap traced or none, rounds
// taking turns, medians. Each round writes a file of its own, as a run to a new path does
// (replacing a trace adds its unlink to the run), removed once timed; the last round's is kept at
// `trace`. Kept, the rounds' traces would take memory the page cache has never held: on the VMs
// measured here a write into such memory cost about nine times one into memory a removed file
// had held (docs/guide.md, "What tracing costs"), so every round after the first few timed the
// host's first touch of the VM's memory. Every run starts with nothing left to write back: the
// kernel writes a trace to disk some seconds after its run, and on two cores that writeback
// would slow whichever run came then.
struct TracedRun {
  double untraced_s = 0, traced_s = 0, hash_s = 0;
  // traced / untraced - 1 of each round (the two runs next to each other in time, so a machine
  // whose speed drifts between rounds moves both): their median, least and most.
  double overhead = 0, least = 0, most = 0;
  std::uintmax_t trace_bytes = 0;
};

std::string round_path(const std::string& path, int round) { return fmt::format("{}.round{}", path, round); }

// Seconds f() takes, started with nothing left to write back.
template <typename F>
double seconds_after_sync(const F& f) {
  ::sync();
  const auto t0 = Clock::now();
  f();
  return seconds_since(t0);
}

// run(path) runs once, untraced when path is empty.
template <typename Run>
TracedRun time_rounds(const std::string& trace, int rounds, const Run& run) {
  std::vector<double> untraced, traced;
  for (int i = 0; i < rounds; ++i) {
    untraced.push_back(seconds_after_sync([&] { run(""); }));
    traced.push_back(seconds_after_sync([&] { run(round_path(trace, i)); }));
    if (i + 1 < rounds) std::filesystem::remove(round_path(trace, i));
    fmt::print(stderr, "{}: round {}, untraced {:.3f} s, traced {:.3f} s\n", trace, i, untraced.back(), traced.back());
  }
  std::filesystem::rename(round_path(trace, rounds - 1), trace);
  TracedRun r;
  r.untraced_s = bench::median(untraced);
  r.traced_s = bench::median(traced);
  std::vector<double> overheads;
  for (int i = 0; i < rounds; ++i) overheads.push_back(traced[i] / untraced[i] - 1);
  r.overhead = bench::median(overheads);
  r.least = *std::min_element(overheads.begin(), overheads.end());
  r.most = *std::max_element(overheads.begin(), overheads.end());
  r.trace_bytes = std::filesystem::file_size(trace);
  return r;
}

// In this process. A traced run declares its model's sha256: the first run of a model file
// computes it, later runs find it in the hash cache (model/hash_cache.hpp), which holds it here
// from the warm-up; hash_s is that first run's extra cost, timed alone.
TracedRun traced_run(const std::string& model, const std::string& backend, const std::string& trace, int rounds) {
  RunSpec s;
  s.backend = backend;
  s.model = model;
  s.prompt = prompt_tokens(kTracePrompt, load_model_config(GgufFile::open(model)).n_vocab);
  s.n_predict = kTraceGenerated;
  s.progress = false;
  const MappedFile bytes(model);
  const auto t0 = Clock::now();
  const std::string hex = sha256_hex(bytes.data(), bytes.size());
  const double hash_s = seconds_since(t0);
  if (GgufFile::open(model).sha256() != hex) throw std::runtime_error("the hash cache disagrees with " + model);
  TracedRun r = time_rounds(trace, rounds, [&](const std::string& path) {
    s.trace = path;
    run_model(s);
  });
  r.hash_s = hash_s;
  return r;
}

// `tapdiff run` of the host engine, untraced, its output thrown away and its messages in `log`.
// preload: a module the run loads first ("": none).
std::string untraced_cli_command(const std::string& tapdiff, const std::string& model, int threads,
                                 const std::string& preload) {
  const std::vector<int> prompt = prompt_tokens(kTracePrompt, load_model_config(GgufFile::open(model)).n_vocab);
  return fmt::format("{}OMP_NUM_THREADS={} '{}' run --backend host -m '{}' --tokens {} -n {}",
                     preload.empty() ? "" : fmt::format("LD_PRELOAD='{}' ", preload), threads, tapdiff, model,
                     fmt::join(prompt, ","), kTraceGenerated);
}

void run_command(const std::string& command, const std::string& log) {
  if (std::system(fmt::format("{} > /dev/null 2> '{}'", command, log).c_str()) != 0)
    throw std::runtime_error(command + " failed: see " + log);
}

// The host engine through the CLI, a process per run (`tapdiff run`, as users run it): all of a
// run's memory is faulted in fresh. preload: a module every run loads first ("": none).
TracedRun traced_cli_run(const std::string& tapdiff, const std::string& model, const std::string& trace, int threads,
                         int rounds, const std::string& preload = "") {
  const std::string run = untraced_cli_command(tapdiff, model, threads, preload);
  const std::string log = trace + ".stderr";
  const TracedRun r = time_rounds(trace, rounds, [&](const std::string& path) {
    run_command(path.empty() ? run : fmt::format("{} -o '{}'", run, path), log);
  });
  std::filesystem::remove(log);
  return r;
}

// `bytes` written to a new `file` in 64 KiB pwrites.
void write_bytes(const std::string& file, std::uintmax_t bytes) {
  const std::vector<char> block(64 * 1024, 1);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw std::runtime_error("cannot create " + file);
  for (std::uintmax_t at = 0; at < bytes; at += block.size()) {
    const std::size_t n = std::min<std::uintmax_t>(block.size(), bytes - at);
    if (::pwrite(fd, block.data(), n, off_t(at)) != ssize_t(n)) {
      ::close(fd);
      throw std::runtime_error("cannot write " + file);
    }
  }
  ::close(fd);
}

// The floor under a trace of `bytes`: those bytes alone written in 64 KiB pwrites, with nothing
// else, each round to a new file after a sync, removed once timed, as time_rounds's traced runs
// write theirs; the median.
double write_alone_s(const std::string& path, std::uintmax_t bytes, int rounds) {
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    times.push_back(seconds_after_sync([&] { write_bytes(path, bytes); }));
    std::filesystem::remove(path);
  }
  return bench::median(times);
}

// The untraced `tapdiff run` process, then the same with a thread of this process writing
// `bytes` (write_bytes) while it runs: what a writer thread beside the engine could hide of a
// trace's writes at best, since it does no HDF5 work and waits on nothing.
TracedRun written_alongside_cli_run(const std::string& tapdiff, const std::string& model, const std::string& path,
                                    int threads, int rounds, std::uintmax_t bytes) {
  const std::string run = untraced_cli_command(tapdiff, model, threads, "");
  const std::string log = path + ".stderr";
  const TracedRun r = time_rounds(path, rounds, [&](const std::string& file) {
    if (file.empty()) return run_command(run, log);
    std::exception_ptr failed;
    std::thread writer([&] {
      try {
        write_bytes(file, bytes);
      } catch (...) {
        failed = std::current_exception();
      }
    });
    run_command(run, log);
    writer.join();
    if (failed) std::rethrow_exception(failed);
  });
  std::filesystem::remove(log);
  std::filesystem::remove(path);
  return r;
}

std::string overhead_text(const TracedRun& r) {
  return fmt::format("{:+.1f}% ({:+.1f} to {:+.1f}%)", 100 * r.overhead, 100 * r.least, 100 * r.most);
}

// One decimal: a figure within a point of its target must not read as on it.
std::string percent(double x) { return fmt::format("{:.1f}%", 100 * x); }
std::string verdict(double x, double target) {
  return x >= target ? "met" : fmt::format("missed by {:.1f} points", 100 * (target - x));
}

struct DiffTiming {
  double diff_s = 1e30, raw_s = 1e30;
  std::string verdict;
};

// tapdiff diff of two traces against a raw HDF5 read of both, best of 3 taking turns.
DiffTiming time_diff(const std::string& a, const std::string& b) {
  DiffTiming t;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    const diff::DiffResult d = diff::diff_traces(a, b);
    t.diff_s = std::min(t.diff_s, seconds_since(t0));
    t.verdict = diff::verdict_text(d.verdict);
    t.raw_s = std::min(t.raw_s, bench::time_hdf5_read_all(a) + bench::time_hdf5_read_all(b));
  }
  return t;
}

// time_diff in a process of its own, as `tapdiff diff` runs (fresh memory, no engine threads).
DiffTiming time_diff_in_fresh_process(const std::string& exe, const std::string& a, const std::string& b) {
  const std::string command = fmt::format("'{}' --time-diff '{}' '{}'", exe, a, b);
  FILE* child = popen(command.c_str(), "r");
  if (child == nullptr) throw std::runtime_error("cannot run " + command);
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, child) != nullptr;
  if (pclose(child) != 0 || !read) throw std::runtime_error(command + " failed");
  DiffTiming t;
  std::istringstream(line) >> t.diff_s >> t.raw_s >> t.verdict;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--time-diff") {  // time_diff_in_fresh_process's child
    const DiffTiming t = time_diff(argv[2], argv[3]);
    fmt::print("{} {} {}\n", t.diff_s, t.raw_s, t.verdict);
    return 0;
  }
  CLI::App app{"tapdiff SmolLM2-135M benchmark: reference, host engine, tracing and diff"};
  std::string q4 = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  // Generated files go next to the executable, in its build tree.
  const std::string exe_dir = std::filesystem::absolute(argv[0]).parent_path().string();
  std::string f32 = exe_dir + "/SmolLM2-135M-Instruct.F32.gguf";
  std::string work = exe_dir + "/models-traces";
  std::string out = "bench/results/models.md";
  int threads = 2, reps = 3, trace_rounds = 5;
  app.add_option("--model", q4, "The Q4_1 original (scripts/fetch-models.sh fetches it)")->capture_default_str();
  app.add_option("--f32", f32, "Its F32 copy (written when absent; default next to this executable)");
  app.add_option("--threads", threads, "OpenMP threads")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "Repetitions; the best is reported")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--trace-rounds", trace_rounds, "Rounds of the tracing table (an untraced and a traced run each)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--work", work, "Directory for the traces (default next to this executable)");
  app.add_option("-o,--out", out, "Results file (Markdown)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // The hash cache of this run alone, in its work folder: nothing from the user's earlier runs.
  std::filesystem::remove_all(work + "/hash-cache");
  ::setenv("XDG_CACHE_HOME", (std::filesystem::absolute(work) / "hash-cache").c_str(), 1);
  std::string command = std::getenv("OMP_WAIT_POLICY") != nullptr
                            ? fmt::format("OMP_WAIT_POLICY={} ", std::getenv("OMP_WAIT_POLICY"))
                            : std::string();
  command += fmt::format("{}", fmt::join(argv, argv + argc, " "));

  try {
    omp_set_num_threads(threads);
    const std::string load_before = bench::load_average();
    if (bench::write_f32_copy(q4, f32)) fmt::print(stderr, "wrote {}\n", f32);
    const double bandwidth = bench::read_bandwidth_gbs();
    fmt::print(stderr, "read bandwidth {:.1f} GB/s\n", bandwidth);

    ModelConfig config;
    double weight_bytes = 0;
    const double step_flops = [&] {
      config = load_model_config(GgufFile::open(q4));
      return bench::gemm_flops(bench::prefill_gemms(config, kPrefill));
    }();
    double engine_tg_f32 = 0;  // the F32 copy's at f32 (float32 GEMVs, as the probes), for the decode breakdown
    struct Row {
      std::string what, model, precision;
      double tps, bound;  // bound: tok/s at the bandwidth bound; 0 = none
    };
    std::vector<Row> rows;
    std::vector<std::pair<std::string, double>> prefill_gflops, encoded_mb;
    for (const auto& [label, path] : {std::pair{std::string("Q4_1 original"), q4}, std::pair{std::string("F32 copy"), f32}}) {
      const GgufFile file = GgufFile::open(path);
      // The reference reads its matrices as float32; the engine reads them in their encoding.
      weight_bytes = 0;
      double encoded_bytes = 0;
      for (const auto& t : file.tensors()) {
        weight_bytes += double(t.n_elements) * sizeof(float);
        encoded_bytes += double(t.n_bytes);
      }
      encoded_mb.emplace_back(label, encoded_bytes / 1e6);
      const double bound = bandwidth * 1e9 / weight_bytes, engine_bound = bandwidth * 1e9 / encoded_bytes;
      const double ref_tps = reference_decode_tps(file, reps);
      fmt::print(stderr, "{}: reference decode {:.1f} tok/s (bound {:.1f})\n", label, ref_tps, bound);
      rows.push_back({"reference decode", label, "f32", ref_tps, bound});
      for (engine::Precision p : {engine::Precision::f32, engine::Precision::f16}) {
        const EngineSpeed e = engine_speed(file, config, p, reps);
        const std::string precision(engine::precision_name(p));
        fmt::print(stderr, "{}: engine {} pp128 {:.1f} tok/s, tg64 {:.1f} tok/s\n", label, precision, e.pp, e.tg);
        rows.push_back({"engine pp128", label, precision, e.pp, 0});
        rows.push_back({"engine tg64", label, precision, e.tg, engine_bound});
        if (label == "F32 copy" && p == engine::Precision::f32) engine_tg_f32 = e.tg;
        prefill_gflops.emplace_back(fmt::format("{}, {}", label, precision), step_flops * e.pp / kPrefill / 1e9);
      }
    }
    const double sgemm_s = bench::time_sgemm(bench::prefill_gemms(config, kPrefill), reps);
    const double sgemm_gflops = step_flops / sgemm_s / 1e9;
    const double gemm_host_s = bench::time_gemm_host(bench::prefill_gemms(config, kPrefill), reps);
    fmt::print(stderr, "OpenBLAS SGEMM {:.1f} GFLOP/s, engine host GEMM {:.1f} GFLOP/s\n", sgemm_gflops,
               step_flops / gemm_host_s / 1e9);
    const double gemv_engine_s = bench::time_gemm_host(bench::prefill_gemms(config, 1), reps);
    const double gemv_split_s = bench::time_decode_sgemv_all_split(config, reps);
    fmt::print(stderr, "decode GEMVs alone: {:.1f} tok/s (engine's slicing), {:.1f} tok/s (sgemv_t, all split)\n",
               1 / gemv_engine_s, 1 / gemv_split_s);

    std::filesystem::create_directories(work);
    const TracedRun ref = traced_run(q4, "reference", work + "/reference.h5", trace_rounds);
    const TracedRun eng = traced_run(q4, "host", work + "/engine-host.h5", trace_rounds);
    omp_pause_resource_all(omp_pause_soft);  // this process's spinning threads: ended, not to compete
    // Processes vary more from run to run, and take a second a round: three times the rounds.
    const int cli_rounds = 3 * trace_rounds;
    const TracedRun eng_cli = traced_cli_run(exe_dir + "/../app/tapdiff", q4, work + "/engine-host-cli.h5", threads, cli_rounds);
    const TracedRun eng_discard = traced_cli_run(exe_dir + "/../app/tapdiff", q4, work + "/engine-host-discard.h5",
                                                 threads, cli_rounds, exe_dir + "/libdiscard_writes.so");
    std::filesystem::remove(work + "/engine-host-discard.h5");  // not a trace: its data was never written
    const double write_s = write_alone_s(work + "/written-alone.bin", eng_cli.trace_bytes, trace_rounds);
    const TracedRun alongside = written_alongside_cli_run(exe_dir + "/../app/tapdiff", q4, work + "/written-alongside.bin",
                                                          threads, cli_rounds, eng_cli.trace_bytes);
    const double traced_mb = double(ref.trace_bytes + eng.trace_bytes) / 1e6;
    const DiffTiming diff_timing = time_diff_in_fresh_process(std::filesystem::absolute(argv[0]).string(),
                                                              work + "/reference.h5", work + "/engine-host.h5");
    const double diff_s = diff_timing.diff_s, raw_s = diff_timing.raw_s;

    std::ostringstream md;
    md << "# SmolLM2-135M-Instruct: reference, host engine, tracing and diff\n\n"
       << "Machine: " << bench::machine_description() << "  \n"
       << fmt::format("Threads: {} (OpenMP; OpenBLAS runs single-threaded inside OpenMP slices)  \n", threads)
       << "OMP_WAIT_POLICY: " << (std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "unset") << "  \n"
       << "Load average before the run: " << load_before << " (other work on the machine slows every figure)  \n"
       << "Command: `" << command << "` (`make bench` runs it)  \n"
       << fmt::format("Models: `{}` (Q4_1, sha256 pinned in scripts/fetch-models.sh) and `{}` (every tensor "
                      "dequantized by model/ and written as F32 by tapdiff's GGUF writer).  \n",
                      q4, f32)
       << fmt::format("Read bandwidth (probe, {} threads): {:.1f} GB/s. The reference holds its matrices as float32, so "
                      "its decode step reads {:.0f} MB of weights whatever the file's type: bound {:.1f} tok/s. The "
                      "engine reads them in their GGUF encoding: {:.0f} MB ({}) and {:.0f} MB ({}).\n\n",
                      threads, bandwidth, weight_bytes / 1e6, bandwidth * 1e9 / weight_bytes, encoded_mb[0].second,
                      encoded_mb[0].first, encoded_mb[1].second, encoded_mb[1].first)
       << "## Speed against the bounds (best of " << reps << ")\n\n"
       << "| measure | model | precision | tok/s | bound | of bound | target |\n|---|---|---|---|---|---|---|\n";
    for (const Row& r : rows) {
      if (r.bound > 0) {
        const double target = r.what == "reference decode" ? 0.5 : 0.7;
        md << fmt::format("| {} | {} | {} | {:.1f} | {:.1f} tok/s (bandwidth) | {} | ≥ {}: {} |\n", r.what, r.model,
                          r.precision, r.tps, r.bound, percent(r.tps / r.bound), percent(target),
                          verdict(r.tps / r.bound, target));
      } else {
        md << fmt::format("| {} | {} | {} | {:.1f} | see prefill below | | |\n", r.what, r.model, r.precision, r.tps);
      }
    }
    md << fmt::format("\n## Prefill against OpenBLAS SGEMM\n\nThe GEMMs of one pp128 step ({:.1f} GFLOP: seven "
                      "projections per layer at 128 positions, the output head at the last one) run as plain "
                      "`cblas_sgemm` calls, one single-threaded call per OpenMP thread on a slice of the weight's "
                      "rows ({} threads): {:.3f} s, {:.1f} GFLOP/s. The engine's host GEMM "
                      "(`engine::gemm_host`: AVX-512 tiles where the CPU has them, docs/engine.md \"Host GEMM\") "
                      "on the same GEMMs: {:.3f} s, {:.1f} GFLOP/s.\n\n",
                      step_flops / 1e9, threads, sgemm_s, sgemm_gflops, gemm_host_s, step_flops / gemm_host_s / 1e9)
       << "| engine pp128 | GEMM GFLOP/s | of SGEMM | target |\n|---|---|---|---|\n";
    for (const auto& [what, gflops] : prefill_gflops)
      md << fmt::format("| {} | {:.1f} | {} | ≥ 50%: {} |\n", what, gflops, percent(gflops / sgemm_gflops),
                        verdict(gflops / sgemm_gflops, 0.5));
    const double bound = bandwidth * 1e9 / weight_bytes;
    md << "\n## Decode: where the time goes\n\nThe weight GEMVs of one decode step (the seven projections of "
          "every layer and the output head, distinct float32 weights) timed alone, against the engine's whole "
          "decode step (F32 copy, f32).\n\n"
       << "| what | ms per token | tok/s | of bound |\n|---|---|---|---|\n";
    const std::pair<const char*, double> steps[] = {
        {"bandwidth bound", 1 / bound},
        {"decode GEMVs alone, the engine's host GEMM (one sdot per output; products under the GEMM's threshold on one thread: 2^17 flops where threads spin, else 2^20)", gemv_engine_s},
        {"decode GEMVs alone as OpenBLAS sgemv_t calls, every product split across the threads", gemv_split_s},
        {"engine tg64 step (GEMVs, norms, RoPE, attention, adds)", 1 / engine_tg_f32}};
    for (const auto& [what, s] : steps)
      md << fmt::format("| {} | {:.1f} | {:.1f} | {} |\n", what, 1e3 * s, 1 / s, percent(1 / s / bound));
    md << fmt::format("\nThe GEMVs alone take {} of the engine's decode step.\n", percent(gemv_engine_s * engine_tg_f32));
    const int positions = kTracePrompt + kTraceGenerated;
    md << fmt::format("\n## Tracing: every tap on vs none\n\nA whole run (load, one prefill step of {} prompt "
                      "tokens, {} decode steps, close) of the Q4_1 model, every tap written to an uncompressed trace; "
                      "{} rounds ({} for the `tapdiff run` processes) of an untraced run then a traced one, times "
                      "their medians, overhead the median of the rounds' own ratios (least to most in brackets). A trace declares its model's sha256: the first traced run of "
                      "a model file computes it (the last column, the hash timed alone added), every later run reads "
                      "it from the hash cache (docs/guide.md, \"Model hashes\").\n\n",
                      kTracePrompt, kTraceGenerated - 1, trace_rounds, cli_rounds)
       << "| program | untraced s | traced s | overhead | trace MB | trace bytes per token | first traced run of the "
          "file |\n|---|---|---|---|---|---|---|\n";
    for (const auto& [what, r] : {std::pair{"reference", ref}, std::pair{"engine host f32", eng}})
      md << fmt::format("| {} | {:.2f} | {:.2f} | {} | {:.1f} | {:.0f} | {:+.1f}% (hash {:.2f} s) |\n", what,
                        r.untraced_s, r.traced_s, overhead_text(r), double(r.trace_bytes) / 1e6,
                        double(r.trace_bytes) / positions, 100 * ((r.traced_s + r.hash_s) / r.untraced_s - 1),
                        r.hash_s);
    md << fmt::format("| engine host f32, a `tapdiff run` process per run | {:.2f} | {:.2f} | {} | {:.1f} | {:.0f} "
                      "| |\n",
                      eng_cli.untraced_s, eng_cli.traced_s, overhead_text(eng_cli),
                      double(eng_cli.trace_bytes) / 1e6, double(eng_cli.trace_bytes) / positions);
    md << fmt::format("| the same, the trace's data not written (`bench/discard_writes.c`) | {:.2f} | {:.2f} | {} | | | |\n",
                      eng_discard.untraced_s, eng_discard.traced_s, overhead_text(eng_discard));
    md << "\nIn one process (the first two rows) a run finds memory that earlier runs faulted in; a process per "
          "run, as users run `tapdiff run`, faults all of its memory in fresh, which on a virtual machine can cost "
          "more than the writes (docs/guide.md, \"What tracing costs\"). The last row's runs load a module "
          "(`LD_PRELOAD`) that returns from every `pwrite` of 16 KiB or more without writing: they do all of the "
          "writer's work except copying the trace's data into the page cache (smaller writes, most of HDF5's metadata, "
          "still go to the file). What is left of the overhead there is the writer's own work, and the engine's beside "
          "it; the rest of the row above it is the bytes.\n";
    md << fmt::format("\nThe trace's {:.1f} MB written alone, with nothing else (64 KiB `pwrite`s, a new file each "
                      "round removed once timed, as the traced runs' are; the median of {} rounds): {:.3f} s, "
                      "{} of the untraced `tapdiff run` process. Any writer of a file that size through this "
                      "machine's page cache pays that much on top of the run.\n",
                      double(eng_cli.trace_bytes) / 1e6, trace_rounds, write_s, percent(write_s / eng_cli.untraced_s));
    const double alongside_s = alongside.traced_s - alongside.untraced_s;
    md << fmt::format("\nThose bytes written by a thread of the timing process while an untraced `tapdiff run` "
                      "process runs beside it ({} rounds, the run alone then with the writer): {:.2f} s against "
                      "{:.2f} s, {}; the run took {:.3f} s longer, {} of the {:.3f} s the bytes take alone. That "
                      "writer does none of HDF5's work and waits on nothing: what the run still pays for it is the "
                      "least a writer thread beside the engine's {} threads could leave on these {} cores.\n",
                      cli_rounds, alongside.traced_s, alongside.untraced_s, overhead_text(alongside), alongside_s,
                      percent(alongside_s / write_s), write_s, threads, std::thread::hardware_concurrency());
    md << fmt::format("\n## Diff throughput\n\n`tapdiff diff` of those two traces (verdict {}), against reading every "
                      "dataset of both files with H5Dread and no tapdiff code, best of 3 taking turns, in a process of "
                      "their own (as `tapdiff diff` runs). Both read the files from the page cache (just written). "
                      "diff reads on a thread of its own while it measures what it has read, a stack's slots at "
                      "a time into a few MB of memory it reuses (diff/pair_reader.hpp).\n\n",
                      diff_timing.verdict)
       << "| reader | MB (both traces) | s | MB/s |\n|---|---|---|---|\n"
       << fmt::format("| tapdiff diff (library call, no report) | {:.1f} | {:.2f} | {:.0f} |\n", traced_mb, diff_s,
                      traced_mb / diff_s)
       << fmt::format("| raw HDF5 read | {:.1f} | {:.2f} | {:.0f} |\n", traced_mb, raw_s, traced_mb / raw_s)
       << fmt::format("\ndiff reaches {} of the raw read throughput (target: at least 50%).\n", percent(raw_s / diff_s));

    std::filesystem::create_directories(std::filesystem::path(out).parent_path());
    std::ofstream f(out);
    if (!f) throw std::runtime_error("cannot write " + out);
    f << md.str();
    fmt::print("{}\nwritten to {}\n", md.str(), out);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_models: {}\n", e.what());
    return 2;
  }
}
