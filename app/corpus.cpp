#include "app/corpus.hpp"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <sstream>

#include "app/progress.hpp"
#include "app/token_list.hpp"
#include "diff/compare.hpp"
#include "model/error.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "tapdiff/trace_reader.hpp"

namespace tapdiff {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "corpus", "cannot be opened for reading");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The logits of a window's trace: (positions, n_vocab) rows.
TapRows window_logits(const std::string& trace) {
  const TraceReader reader(trace);
  return reader.read(reader.tap("output", -1));
}

// "engine-host f16, fault rope-wrong-base", from the trace.
std::string side_text(const TraceMetadata& m) {
  return fmt::format("{} {}{}", producer_name(m.producer), m.precision, m.fault == "none" ? "" : ", fault " + m.fault);
}

// The corpus's tokens: ids separated by commas or white space in a .tokens file, else the text
// tokenized by the model; and the BOS each window starts with (-1: a token file, or a model
// whose tokenizer adds none).
struct CorpusTokens {
  std::vector<int> ids;
  int bos = -1;
};

CorpusTokens read_corpus(const std::string& file, const std::string& model) {
  std::string text = read_file(file);
  if (std::filesystem::path(file).extension() == ".tokens") {
    for (char& c : text)
      if (c == '\n' || c == '\r' || c == '\t' || c == ' ') c = ',';
    std::string ids;  // runs of separators as one comma
    for (char c : text)
      if (c != ',' || (!ids.empty() && ids.back() != ',')) ids += c;
    while (!ids.empty() && ids.back() == ',') ids.pop_back();
    return {parse_token_list(ids, file), -1};
  }
  const Tokenizer tokenizer = Tokenizer::from_gguf(GgufFile::open(model));
  return {tokenizer.encode(text), tokenizer.bos_added()};
}

// Window w of `size` tokens, its first token replaced by BOS as llama-perplexity does.
std::vector<int> window_tokens(const CorpusTokens& corpus, int w, int size) {
  std::vector<int> window(corpus.ids.begin() + std::ptrdiff_t(w) * size, corpus.ids.begin() + std::ptrdiff_t(w + 1) * size);
  if (corpus.bos >= 0) window.front() = corpus.bos;
  return window;
}

// Where the window of the largest KL divergence first diverges: that window again, every tap
// recorded, diffed as `check` would.
void locate_in_worst_window(diff::CorpusReport& report, const CorpusTokens& corpus, RunSpec expected, RunSpec actual,
                            const std::string& dir, bool keep) {
  namespace fs = std::filesystem;
  expected.prompt = actual.prompt = window_tokens(corpus, report.summary.worst_window, report.window);
  expected.taps = actual.taps = {};
  expected.trace = (fs::path(dir) / "worst-window-expected.h5").string();
  actual.trace = (fs::path(dir) / "worst-window-actual.h5").string();
  run_model(expected);
  run_model(actual);
  diff::DiffOptions options;
  options.model_path = actual.model;
  const diff::DiffResult d = diff::diff_traces(expected.trace, actual.trace, options);
  const auto [at, why] = diff::leading_finding(d);
  report.worst_window_finding =
      at ? fmt::format("{} @ {} · {}{}", at->tap, at->position, why ? why->bug_class : "unexplained",
                       why && !why->variant.empty() ? " (" + why->variant + ")" : "")
         : fmt::format("no tap beyond the {} profile: each op within its tolerance, the logits' difference accumulated",
                       d.profile);
  if (keep) {
    report.worst_window_traces = {expected.trace, actual.trace};
  } else {
    fs::remove(expected.trace);
    fs::remove(actual.trace);
  }
}

}  // namespace

diff::CorpusReport run_corpus(const RunSpec& engine, const CorpusOptions& o, const diff::CorpusGate& given,
                              const std::string& dir, bool keep) {
  namespace fs = std::filesystem;
  if (o.window < 4) throw std::invalid_argument(fmt::format("--window: expected >= 4 tokens, got {}", o.window));
  const CorpusTokens corpus = read_corpus(o.file, engine.model);
  int n_windows = static_cast<int>(corpus.ids.size() / std::size_t(o.window));
  if (n_windows < 1)
    throw InputError(o.file, "corpus",
                     fmt::format("{} tokens, fewer than one window of {} (--window)", corpus.ids.size(), o.window));
  if (o.max_windows > 0) n_windows = std::min(n_windows, o.max_windows);

  diff::CorpusReport report;
  report.corpus = o.file;
  report.n_tokens = static_cast<std::int64_t>(corpus.ids.size());
  report.window = o.window;
  report.n_windows = n_windows;
  RunSpec expected;
  expected.model = engine.model;
  RunSpec actual = engine;
  for (RunSpec* s : {&expected, &actual}) {
    s->n_predict = 0;
    s->logits_all = true;
    s->taps = {};
    s->taps.names = "output";
    s->progress = false;
  }

  diff::CorpusStats stats;
  Progress progress("corpus", engine.progress);
  const int first = o.window / 2;
  for (int w = 0; w < n_windows; ++w) {
    progress.update(w, n_windows, fmt::format("window {}", w + 1));
    const std::vector<int> window = window_tokens(corpus, w, o.window);
    expected.prompt = actual.prompt = window;
    expected.trace = (fs::path(dir) / fmt::format("window-{}-expected.h5", w)).string();
    actual.trace = (fs::path(dir) / fmt::format("window-{}-actual.h5", w)).string();
    run_model(expected);
    run_model(actual);
    if (w == 0) {
      const TraceReader side(actual.trace);
      report.expected = side_text(TraceReader(expected.trace).metadata());
      report.actual = side_text(side.metadata());
      report.gate = diff::corpus_gate_for(side.metadata().precision, given);
    }
    const TapRows a = window_logits(expected.trace), b = window_logits(actual.trace);
    const std::int64_t n_vocab = a.row_size;
    if (b.row_size != n_vocab || a.size() != std::size_t(o.window) || b.size() != std::size_t(o.window))
      throw std::runtime_error(fmt::format("window {}: expected {} logits rows of {} on both sides, got {} and {}", w,
                                           o.window, n_vocab, a.size(), b.size()));
    for (int j = first; j < o.window - 1; ++j)
      stats.add(a.row(std::size_t(j)), b.row(std::size_t(j)), n_vocab, window[std::size_t(j + 1)], w, j);
    if (!keep) {
      fs::remove(expected.trace);
      fs::remove(actual.trace);
    }
  }
  progress.finish();
  report.summary = stats.summary();
  report.failures = diff::corpus_gate_failures(report.summary, report.gate);
  if (!report.failures.empty()) locate_in_worst_window(report, corpus, expected, actual, dir, keep);
  return report;
}

}  // namespace tapdiff
