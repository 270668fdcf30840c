#include "app/harness.hpp"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <optional>

#include "app/progress.hpp"
#include "app/run_checks.hpp"
#include "app/subprocess.hpp"
#include "app/token_list.hpp"
#include "app/trace_metadata_for.hpp"
#include "diff/repeats.hpp"
#include "engine/generate.hpp"
#include "model/error.hpp"
#include "model/gguf.hpp"
#include "reference/generate.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/trace_reader.hpp"
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

// The options of each program are built, and checked, before the run's trace is opened: a run
// refused for its options leaves a file at its -o path as it was.
struct ReferenceRun {
  ref::GenerateOptions generate;
  std::optional<WeightTapOptions> weights;
};

ReferenceRun reference_options(const RunSpec& s, const GgufFile& file, const ModelConfig& config) {
  if (!s.fault.empty())
    throw std::invalid_argument("--inject: faults are injected into the engine (--backend host|cuda), not the reference");
  if (s.prefill_chunk != 0)
    throw std::invalid_argument("--prefill-chunk: the reference runs one token at a time; chunking is an engine option");
  ReferenceRun r;
  ref::GenerateOptions& g = r.generate;
  g.n_predict = s.n_predict;
  if (s.precision == "f64") g.precision = ref::Precision::f64;
  else if (s.precision != "f32")
    throw std::invalid_argument(fmt::format("--precision: the reference runs f32 or f64, got {}", s.precision));
  g.sampling = s.sampling;
  g.logits_all = s.logits_all;
  if (!s.trace.empty()) r.weights = weight_tap_options(s, file);
  check_context_fits(s, config, ref::context_bytes(config, int(s.prompt.size()) + s.n_predict, g.precision));
  return r;
}

std::vector<int> run_reference(const RunSpec& s, const GgufFile& file, ReferenceRun r, TraceWriter* trace) {
  Progress progress("reference", s.progress);
  r.generate.on_step = [&](int, int token, int done, int total) {
    progress.update(done, total, fmt::format("last token {}", token));
  };
  const ref::Weights weights = ref::load_weights(file, s.weight_cache_mib << 20);
  if (trace != nullptr && r.weights) ref::record_weight_taps(weights, file, *trace, *r.weights);
  auto tokens = ref::generate(weights, s.prompt, r.generate, trace);
  progress.finish();
  return tokens;
}

engine::EngineOptions engine_options(const RunSpec& s, const GgufFile& file, const ModelConfig& config,
                                     engine::Backend backend) {
  engine::EngineOptions e;
  e.backend = backend;
  const auto precision = engine::parse_precision(s.precision);
  if (!precision)
    throw std::invalid_argument(fmt::format("--precision: the engine runs f32, f16, bf16 or q8, got {}", s.precision));
  e.precision = *precision;
  e.fault = s.fault;
  e.lockstep = s.lockstep;
  e.n_predict = s.n_predict;
  e.prefill_chunk = s.prefill_chunk;
  e.logits_all = s.logits_all;
  if (s.logits_all && !s.lockstep.empty())
    throw std::invalid_argument("--logits all: a lockstep run records the logits the lockstep trace has; drop --logits");
  if (!s.trace.empty()) e.weights = weight_tap_options(s, file);
  if (s.sampling.temperature > 0)
    throw std::invalid_argument("--temperature: the engine decodes greedily; sampling is a reference option");
  engine::check_options(file, s.prompt, e);
  // A device holds a CUDA run's context.
  if (backend == engine::Backend::host)
    check_context_fits(s, config, engine::context_bytes(config, int(s.prompt.size()), e));
  return e;
}

std::vector<int> run_engine(const RunSpec& s, const GgufFile& file, engine::EngineOptions e, TraceWriter* trace) {
  Progress progress(fmt::format("engine-{}", engine::backend_name(e.backend)), s.progress);
  e.on_step = [&](int, int token, int done, int total) {
    progress.update(done, total, fmt::format("last token {}", token));
  };
  auto tokens = engine::generate(file, s.prompt, e, trace);
  progress.finish();
  return tokens;
}

// The tap filter, widened to the weight taps when --weights asks for them and --taps names
// only some taps (a filter of exclusions alone already admits them).
TapFilterSpec with_weight_taps(const RunSpec& s) {
  TapFilterSpec f = s.taps;
  if (s.weights.empty() || f.names.empty()) return f;
  const std::vector<std::string_view> globs = name_globs(f.names);
  const auto includes = [](std::string_view g) { return !g.empty() && g[0] != '!'; };
  if (std::any_of(globs.begin(), globs.end(), includes))
    f.names += fmt::format(",{}*,{}*", kWeightTapPrefix, kWeightStatsTapPrefix);
  return f;
}

std::optional<TraceWriter> open_trace(const RunSpec& s, TraceMetadata metadata) {
  if (s.trace.empty()) return std::nullopt;
  WriterOptions w;
  w.filter = TapFilter::parse(with_weight_taps(s));
  w.compress = s.compress;
  metadata.lockstep_source = s.lockstep;
  return std::optional<TraceWriter>(std::in_place, s.trace, std::move(metadata), std::move(w));
}

// Options of tapdiff's own programs, which a third-party engine refuses by name.
void refuse_own_options(const RunSpec& s, const std::string& engine, const std::string& precision_note) {
  if (!s.fault.empty())
    throw std::invalid_argument(fmt::format("--inject: faults are injected into tapdiff's engine, not {}{}", engine,
                                            engine == "llama.cpp" ? "; misconfigure it with --llama-override" : ""));
  if (!s.lockstep.empty()) throw std::invalid_argument(fmt::format("--lockstep: {} cannot continue from another trace", engine));
  if (!s.weights.empty())
    throw std::invalid_argument(fmt::format("--weights: {}'s weights are not recorded (tapdiff's reference and engine "
                                            "record weight taps)", engine));
  if (s.sampling.temperature > 0) throw std::invalid_argument(fmt::format("--temperature: {} runs greedily here", engine));
  if (s.precision != "f32") throw std::invalid_argument(fmt::format("--precision {}: {}", s.precision, precision_note));
  if (s.prefill_chunk != 0) throw std::invalid_argument(fmt::format("--prefill-chunk: {} batches its prompt itself", engine));
}

// llama.cpp through libllama: its own context of prompt + n_predict positions, its precision
// and settings recorded in the trace.
std::vector<int> run_llama_cpp(const RunSpec& s, const GgufFile& file) {
  refuse_own_options(s, "llama.cpp", "llama.cpp's arithmetic follows the model's weight types and --llama-kv-type; "
                                     "the trace records it");
  const int n_ctx = static_cast<int>(s.prompt.size()) + s.n_predict;
  adapters::llama_cpp::LlamaRun run(s.model, s.llama, n_ctx);
  TraceMetadata metadata = trace_metadata_for(file, Producer::llama_cpp, "f32", "", s.prompt, s.n_predict);
  run.describe(metadata);
  const TapDims dims = *metadata.dims;
  std::optional<TraceWriter> trace = open_trace(s, std::move(metadata));
  Progress progress("llama.cpp", s.progress);
  auto tokens = run.generate(s.prompt, s.n_predict, dims, s.logits_all, trace ? &*trace : nullptr,
                             [&](int done, int total, int token) {
                               progress.update(done, total, fmt::format("last token {}", token));
                             });
  progress.finish();
  if (trace) trace->close();
  return tokens;
}

// transformers: python/tapdiff_transformers.py in the project's Python writes the trace; its
// stdout's "tokens:" line is the run's tokens.
std::vector<int> run_transformers(const RunSpec& s) {
  refuse_own_options(s, "transformers", "the transformers producer runs float32");
  if (!s.taps.names.empty() || !s.taps.layers.empty() || !s.taps.positions.empty())
    throw std::invalid_argument("--taps, --layers, --positions: the transformers producer records every tap");
  if (s.trace.empty()) throw std::invalid_argument("-o: the transformers producer writes a trace; give its path");
  std::string tokens;
  for (int t : s.prompt) tokens += (tokens.empty() ? "" : ",") + std::to_string(t);
  const ProcessResult p = run_process({TAPDIFF_PYTHON, TAPDIFF_TRANSFORMERS_PRODUCER, "-m", s.model, "--tokens", tokens,
                                       "-n", std::to_string(s.n_predict), "-o", s.trace, "--logits",
                                       s.logits_all ? "all" : "last"},
                                      ".", ChildStdout::capture);
  if (p.status == 2) throw std::invalid_argument("the transformers producer refused its input (its message is above)");
  if (p.status != 0)
    throw std::runtime_error(fmt::format("the transformers producer ({} {}) failed with status {}", TAPDIFF_PYTHON,
                                         TAPDIFF_TRANSFORMERS_PRODUCER, p.status));
  const std::size_t at = p.output.find("tokens: ");
  if (at == std::string::npos) throw std::runtime_error("the transformers producer printed no tokens: line");
  return parse_token_list(p.output.substr(at + 8, p.output.find('\n', at) - at - 8));
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

// The filter as the command line gave it: "--taps 'blk.0.*' --layers 0".
std::string filter_text(const TapFilterSpec& f) {
  std::string out;
  if (!f.names.empty()) out += fmt::format(" --taps '{}'", f.names);
  if (!f.layers.empty()) out += fmt::format(" --layers {}", f.layers);
  if (!f.positions.empty()) out += fmt::format(" --positions {}", f.positions);
  return out.empty() ? out : out.substr(1);
}

// A tap a lockstep run reads from its source that the source's filter left out (every catalogue
// tap the model has, at every layer and position; attn.probs is not read), or none.
std::optional<std::string> first_tap_left_out(const TraceReader& source, const ModelConfig& c) {
  TapFilter filter;
  try {
    filter = TapFilter::parse(source.filter());
  } catch (const std::invalid_argument&) {
    return std::nullopt;  // another producer's filter text: the run finds what is missing
  }
  // The positions the run feeds: its last generated token is not fed back.
  const TraceMetadata& m = source.metadata();
  const std::int64_t fed = std::int64_t(m.tokens.size()) - (std::int64_t(m.tokens.size()) > m.prompt_length ? 1 : 0);
  for (std::int64_t p = 0; p < fed && !filter.positions().all(); ++p)
    if (!filter.positions().contains(p)) return fmt::format("position {}", p);
  for (const TapSpec& spec : tap_catalogue()) {
    const bool has = emitted_by(spec, TapModelFeatures{c.qk_norm, c.post_norms, c.moe()});
    if (!has || std::string_view(spec.name).rfind("attn.probs", 0) == 0) continue;
    if (spec.scope == TapScope::global) {
      if (!filter.tap_enabled(spec.name, -1)) return std::string(spec.name);
      continue;
    }
    for (int layer = 0; layer < c.n_layer; ++layer)
      if (!filter.tap_enabled(spec.name, layer)) return fmt::format("blk.{}.{}", layer, spec.name);
  }
  return std::nullopt;
}

// --lockstep: the model must be the one the trace was recorded with, and the trace's tokens
// are the run's (the prompt, then one step per generated token).
RunSpec with_lockstep_tokens(RunSpec s, const GgufFile& file) {
  if (s.backend == "reference")
    throw std::invalid_argument("--lockstep: the engine runs in lockstep (--backend host|cuda), not the reference");
  if (!s.prompt.empty())
    throw std::invalid_argument("--lockstep: the tokens come from the lockstep trace; drop --tokens and --prompt");
  const TraceReader source(s.lockstep);
  const TraceMetadata& m = source.metadata();
  const std::string sha = file.sha256();
  if (m.model_sha256 != sha)
    throw InputError(s.lockstep, "model_sha256",
                     fmt::format("expected {} (the sha256 of {}), got \"{}\": the trace was recorded with another model",
                                 sha, s.model, m.model_sha256));
  if (m.prompt_length < 1 || static_cast<std::int64_t>(m.tokens.size()) < m.prompt_length)
    throw InputError(s.lockstep, "tokens",
                     fmt::format("expected the prompt's {} tokens and the generated ones, the trace holds {} tokens",
                                 m.prompt_length, m.tokens.size()));
  // The run reads every tap from the source, so a source that lacks some is refused before -o
  // is touched (the run would stop at the first missing tap).
  if (source.taps().empty() && !source.complete())
    throw InputError(s.lockstep, "/taps",
                     "expected the taps of a run, the lockstep source holds none: its run was interrupted before its "
                     "first step was committed");
  if (const auto left_out = first_tap_left_out(source, load_model_config(file)))
    throw InputError(s.lockstep, "/",
                     fmt::format("expected a trace of every tap, the lockstep source was recorded with {} (it leaves "
                                 "out {}): record it without filters",
                                 filter_text(source.filter()), *left_out));
  s.prompt.assign(m.tokens.begin(), m.tokens.begin() + m.prompt_length);
  s.n_predict = static_cast<int>(static_cast<std::int64_t>(m.tokens.size()) - m.prompt_length);
  return s;
}

}  // namespace

std::optional<WeightTapOptions> weight_tap_options(const RunSpec& s, const GgufFile& file) {
  if (s.weights.empty()) return std::nullopt;
  if (!s.taps.positions.empty())
    throw std::invalid_argument("--weights: weight taps keep a tensor's rows at positions 0..rows-1; "
                                "drop --positions to record them");
  std::uint64_t n_parameters = 0;
  for (const GgufTensorInfo& t : file.tensors()) n_parameters += t.n_elements;
  WeightTapOptions o;
  o.mode = resolve_weight_tap_mode(s.weights, n_parameters, s.weights_stats_above);
  return o;
}

std::vector<int> run_model(const RunSpec& spec) { return run_model(spec, GgufFile::open(spec.model)); }

std::vector<int> run_model(const RunSpec& spec, const GgufFile& file) {
  if (spec.backend != "reference" && spec.backend != "host" && spec.backend != "cuda" &&
      spec.backend != "llama.cpp" && spec.backend != "transformers")
    throw std::invalid_argument(
        fmt::format("--backend: expected reference, host, cuda, llama.cpp or transformers, got {}", spec.backend));
  const bool own_program = spec.backend == "reference" || spec.backend == "host" || spec.backend == "cuda";
  const RunSpec s = spec.lockstep.empty() || !own_program ? spec : with_lockstep_tokens(spec, file);
  const ModelConfig config = load_model_config(file);
  check_vocab(s.prompt, config, s.model);
  check_positions(s);
  check_filter_selects(s, config, file);
  if (s.backend == "transformers" || s.backend == "llama.cpp") {
    note_past_training_context(s, config);
    return s.backend == "transformers" ? run_transformers(s) : run_llama_cpp(s, file);
  }
  const bool reference = s.backend == "reference";
  const engine::Backend backend = usable_backend(s.backend);
  const Producer producer = reference                           ? Producer::reference
                            : backend == engine::Backend::cuda ? Producer::engine_cuda
                                                               : Producer::engine_host;
  std::optional<ReferenceRun> reference_run;
  std::optional<engine::EngineOptions> engine_run;
  if (reference) reference_run = reference_options(s, file, config);
  else engine_run = engine_options(s, file, config, backend);
  note_past_training_context(s, config);
  // Only a run that writes a trace declares its model: the hash of a 7B file takes seconds.
  std::optional<TraceWriter> trace;
  if (!s.trace.empty()) {
    TraceMetadata metadata = trace_metadata_for(file, producer, s.precision, s.fault, s.prompt, s.n_predict);
    if (s.prefill_chunk > 0) metadata.settings["prefill_chunk"] = std::int64_t(s.prefill_chunk);
    trace = open_trace(s, std::move(metadata));
  }
  TraceWriter* writer = trace ? &*trace : nullptr;
  auto tokens = reference ? run_reference(s, file, *std::move(reference_run), writer)
                          : run_engine(s, file, *std::move(engine_run), writer);
  if (trace) trace->close();
  return tokens;
}

std::optional<std::pair<diff::FirstDivergence, int>> repeat_engine(const RunSpec& first, int repeat) {
  for (int k = 2; k <= repeat; ++k) {
    RunSpec again = first;
    again.trace = first.trace + fmt::format(".repeat{}.h5", k);
    run_model(again);
    if (auto at = diff::first_repeat_difference(first.trace, again.trace)) return std::pair{*at, k};
    std::error_code ignored;
    std::filesystem::remove(again.trace, ignored);
  }
  return std::nullopt;
}

}  // namespace tapdiff
