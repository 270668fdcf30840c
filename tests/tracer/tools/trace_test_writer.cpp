// Writes a trace step by step for the streaming, kill, disk-full and Python interop tests:
// T catalogue taps x L layers plus the global "output", one position per step, values from
// tests/tracer/support/test_values.hpp. Prints "step S" after each end_step, "paused" when
// told to pause (then waits for a line on stdin), "closed" at the end. A TraceError prints
// "committed N" on stdout, the message on stderr, and exits 2.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "support/test_values.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/trace_writer.hpp"

namespace {

struct Args {
  std::string out;
  int steps = 8;
  int prompt = 1;  // positions of the first step, recorded as one batched record per tap
  int layers = 2;
  int taps = 3;
  int width = 16;
  int pause_after = -1;
  long long fsize_limit = -1;
  int commit_every = 1;
  bool compress = false;
  bool no_close = false;
  bool lazy_taps = false;  // no dims: taps are created when first written
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "missing value for " << k << "\n";
        std::exit(64);
      }
      return argv[++i];
    };
    if (k == "--out")
      a.out = next();
    else if (k == "--steps")
      a.steps = std::stoi(next());
    else if (k == "--prompt")
      a.prompt = std::stoi(next());
    else if (k == "--layers")
      a.layers = std::stoi(next());
    else if (k == "--taps")
      a.taps = std::stoi(next());
    else if (k == "--width")
      a.width = std::stoi(next());
    else if (k == "--pause-after")
      a.pause_after = std::stoi(next());
    else if (k == "--fsize-limit")
      a.fsize_limit = std::stoll(next());
    else if (k == "--commit-every")
      a.commit_every = std::stoi(next());
    else if (k == "--compress")
      a.compress = true;
    else if (k == "--no-close")
      a.no_close = true;
    else if (k == "--lazy-taps")
      a.lazy_taps = true;
    else {
      std::cerr << "unknown argument " << k << "\n";
      std::exit(64);
    }
  }
  if (a.out.empty()) {
    std::cerr << "--out is required\n";
    std::exit(64);
  }
  return a;
}

std::vector<std::string> layer_tap_names(int n) {
  std::vector<std::string> names;
  for (const tapdiff::TapSpec& spec : tapdiff::tap_catalogue()) {
    if (spec.scope == tapdiff::TapScope::layer && static_cast<int>(names.size()) < n) {
      names.emplace_back(spec.name);
    }
  }
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.fsize_limit >= 0) {
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
    const rlimit limit{static_cast<rlim_t>(a.fsize_limit), static_cast<rlim_t>(a.fsize_limit)};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  tapdiff::TraceMetadata meta;
  meta.producer = tapdiff::Producer::external;
  meta.producer_version = "trace_test_writer";
  meta.git_commit = "0123456789ab";
  meta.model_path = "model.gguf";
  meta.prompt_length = a.prompt;
  meta.hparams = {{"n_layer", std::int64_t{a.layers}}, {"kind", std::string("test")}};
  if (!a.lazy_taps) {
    // Catalogue dims make the writer create every tap before the run; widths all equal here.
    tapdiff::TapDims dims;
    dims.n_layer = a.layers;
    dims.n_embd = dims.head_dim = dims.n_ff = dims.n_vocab = a.width;
    dims.n_head = dims.n_head_kv = 1;
    dims.n_ctx = a.prompt + a.steps;
    meta.dims = dims;
  }
  tapdiff::WriterOptions options;
  options.commit_every = a.commit_every;
  options.compress = a.compress;
  const std::vector<std::string> names = layer_tap_names(a.taps);
  std::int64_t committed = 0;
  try {
    tapdiff::TraceWriter trace(a.out, meta, options);
    // Step s records positions [p0, p0 + n): the prompt's at step 0, then one a step.
    const auto rows_of = [&](int t, int l, int p0, int n) {
      std::vector<float> rows;
      for (int p = p0; p < p0 + n; ++p) {
        const std::vector<float> row = tapdiff::test::tap_row(t, l, p, a.width);
        rows.insert(rows.end(), row.begin(), row.end());
      }
      return rows;
    };
    for (int s = 0; s < a.steps; ++s) {
      const int p0 = s == 0 ? 0 : a.prompt + s - 1, n = s == 0 ? a.prompt : 1;
      for (int t = 0; t < static_cast<int>(names.size()); ++t) {
        for (int l = 0; l < a.layers; ++l) {
          const std::vector<float> rows = rows_of(t, l, p0, n);
          trace.record(names[static_cast<std::size_t>(t)], l, p0, n, {a.width}, rows.data());
        }
      }
      const std::vector<float> logits = rows_of(static_cast<int>(names.size()), -1, p0, n);
      trace.record("output", -1, p0, n, {a.width}, logits.data());
      for (int p = p0; p < p0 + n; ++p) trace.append_token(tapdiff::test::token_at(p));
      trace.end_step();
      committed = trace.committed_steps();
      std::printf("step %d\n", s);
      std::fflush(stdout);
      if (s + 1 == a.pause_after) {
        std::printf("paused\n");
        std::fflush(stdout);
        std::string line;
        std::getline(std::cin, line);
      }
    }
    if (a.no_close) std::_Exit(0);
    trace.close();
    std::printf("closed\n");
    return 0;
  } catch (const tapdiff::TraceError& e) {
    std::printf("committed %lld\n", static_cast<long long>(committed));
    std::fflush(stdout);
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
