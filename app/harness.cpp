#include "app/harness.hpp"

#include <fmt/format.h>
#include <optional>

#include "app/progress.hpp"
#include "app/trace_metadata_for.hpp"
#include "engine/generate.hpp"
#include "model/gguf.hpp"
#include "reference/generate.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff {
namespace {

void check_vocab(const std::vector<int>& tokens, const ModelConfig& c, const std::string& model) {
  if (tokens.empty()) throw std::invalid_argument("--tokens: expected at least one prompt token");
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= c.n_vocab)
      throw std::invalid_argument(fmt::format("--tokens: item {} is token {}, but {} has {} tokens (0..{})",
                                              i + 1, tokens[i], model, c.n_vocab, c.n_vocab - 1));
}

std::vector<int> run_reference(const RunSpec& s, const GgufFile& file, TraceWriter* trace) {
  if (!s.fault.empty())
    throw std::invalid_argument("--inject: faults are injected into the engine (--backend host|cuda), not the reference");
  ref::GenerateOptions g;
  g.n_predict = s.n_predict;
  if (s.precision == "f64") g.precision = ref::Precision::f64;
  else if (s.precision != "f32")
    throw std::invalid_argument(fmt::format("--precision: the reference runs f32 or f64, got {}", s.precision));
  g.sampling = s.sampling;
  Progress progress("reference", s.progress);
  g.on_step = [&](int, int token, int done, int total) {
    progress.update(done, total, fmt::format("last token {}", token));
  };
  auto tokens = ref::generate(ref::load_weights(file), s.prompt, g, trace);
  progress.finish();
  return tokens;
}

std::vector<int> run_engine(const RunSpec& s, const GgufFile& file, engine::Backend backend, TraceWriter* trace) {
  engine::EngineOptions e;
  e.backend = backend;
  const auto precision = engine::parse_precision(s.precision);
  if (!precision)
    throw std::invalid_argument(fmt::format("--precision: the engine runs f32, f16 or bf16, got {}", s.precision));
  e.precision = *precision;
  e.fault = s.fault;
  e.n_predict = s.n_predict;
  if (s.sampling.temperature > 0)
    throw std::invalid_argument("--temperature: the engine decodes greedily; sampling is a reference option");
  Progress progress(fmt::format("engine-{}", engine::backend_name(backend)), s.progress);
  e.on_step = [&](int, int token, int done, int total) {
    progress.update(done, total, fmt::format("last token {}", token));
  };
  auto tokens = engine::generate(file, s.prompt, e, trace);
  progress.finish();
  return tokens;
}

// cuda when a device exists; otherwise says so once and runs the host executor.
engine::Backend usable_backend(const std::string& requested) {
  if (requested != "cuda") return engine::Backend::host;
  std::string reason;
  if (engine::cuda_device_available(&reason)) return engine::Backend::cuda;
  static bool said = false;
  if (!said) fmt::print(stderr, "tapdiff: no CUDA device ({}); running the host executor instead\n", reason);
  said = true;
  return engine::Backend::host;
}

}  // namespace

std::vector<int> run_model(const RunSpec& s) {
  if (s.backend != "reference" && s.backend != "host" && s.backend != "cuda")
    throw std::invalid_argument(fmt::format("--backend: expected reference, host or cuda, got {}", s.backend));
  const GgufFile file = GgufFile::open(s.model);
  const ModelConfig config = load_model_config(file);
  check_vocab(s.prompt, config, s.model);
  const bool reference = s.backend == "reference";
  const engine::Backend backend = usable_backend(s.backend);
  const Producer producer = reference                           ? Producer::reference
                            : backend == engine::Backend::cuda ? Producer::engine_cuda
                                                               : Producer::engine_host;
  std::optional<TraceWriter> trace;
  if (!s.trace.empty()) {
    WriterOptions w;
    w.filter = TapFilter::parse(s.taps);
    w.compress = s.compress;
    trace.emplace(s.trace, trace_metadata_for(file, producer, s.precision, s.fault, s.prompt, s.n_predict),
                  std::move(w));
  }
  TraceWriter* writer = trace ? &*trace : nullptr;
  auto tokens = reference ? run_reference(s, file, writer) : run_engine(s, file, backend, writer);
  if (trace) trace->close();
  return tokens;
}

}  // namespace tapdiff
