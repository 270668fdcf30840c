// `tapdiff run`: run a model through the reference or the engine, optionally tracing taps.
#include <fmt/format.h>
#include <optional>

#include "app/commands.hpp"
#include "app/progress.hpp"
#include "app/token_list.hpp"
#include "app/trace_metadata_for.hpp"
#include "engine/generate.hpp"
#include "model/gguf.hpp"
#include "reference/generate.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff {
namespace {

struct RunOptions {
  std::string backend = "reference";
  std::string model;
  std::string tokens;
  std::string prompt;
  int n_predict = 16;
  std::string precision = "f32";
  std::string inject;
  std::string taps, layers, positions;
  std::string output;
  bool compress = false;
  ref::SamplingOptions sampling;
};

std::vector<int> prompt_tokens(const RunOptions& o) {
  if (!o.prompt.empty())
    throw std::invalid_argument(
        "--prompt: text prompts need the tokenizer, which tapdiff does not have yet; pass "
        "token ids with --tokens 1,2,3");
  if (o.tokens.empty()) throw std::invalid_argument("--tokens: expected token ids, e.g. --tokens 1,2,3");
  return parse_token_list(o.tokens);
}

void check_vocab(const std::vector<int>& tokens, const ModelConfig& c, const std::string& model) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] >= c.n_vocab)
      throw std::invalid_argument(fmt::format("--tokens: item {} is token {}, but {} has {} tokens (0..{})",
                                              i + 1, tokens[i], model, c.n_vocab, c.n_vocab - 1));
}

std::optional<TraceWriter> open_trace(const RunOptions& o, const ModelConfig& c, Producer producer,
                                      const std::vector<int>& prompt) {
  if (o.output.empty()) return std::nullopt;
  WriterOptions w;
  w.filter = TapFilter::parse(o.taps, o.layers, o.positions);
  w.compress = o.compress;
  return TraceWriter(o.output,
                     trace_metadata_for(o.model, c, producer, o.precision, o.inject, prompt, o.n_predict),
                     std::move(w));
}

std::vector<int> run_reference(const RunOptions& o, const GgufFile& file, const std::vector<int>& prompt,
                               TraceWriter* trace) {
  if (!o.inject.empty())
    throw std::invalid_argument("--inject: faults are injected into the engine (--backend host|cuda), not the reference");
  ref::GenerateOptions g;
  g.n_predict = o.n_predict;
  if (o.precision == "f64") g.precision = ref::Precision::f64;
  else if (o.precision != "f32")
    throw std::invalid_argument(fmt::format("--precision: the reference runs f32 or f64, got {}", o.precision));
  g.sampling = o.sampling;
  Progress progress("reference");
  g.on_step = [&](int, int token, int done, int total) {
    progress.update(done, total, fmt::format("last token {}", token));
  };
  const auto tokens = ref::generate(ref::load_weights(file), prompt, g, trace);
  progress.finish();
  return tokens;
}

std::vector<int> run_engine(const RunOptions& o, const GgufFile& file, const std::vector<int>& prompt,
                            engine::Backend backend, TraceWriter* trace) {
  engine::EngineOptions e;
  e.backend = backend;
  const auto precision = engine::parse_precision(o.precision);
  if (!precision)
    throw std::invalid_argument(fmt::format("--precision: the engine runs f32, f16 or bf16, got {}", o.precision));
  e.precision = *precision;
  e.fault = o.inject;
  e.n_predict = o.n_predict;
  if (o.sampling.temperature > 0)
    throw std::invalid_argument("--temperature: the engine decodes greedily; sampling is a reference option");
  Progress progress(std::string("engine-") + std::string(engine::backend_name(backend)));
  e.on_step = [&](int, int token, int done, int total) {
    progress.update(done, total, fmt::format("last token {}", token));
  };
  const auto tokens = engine::generate(file, prompt, e, trace);
  progress.finish();
  return tokens;
}

// cuda when a device exists; otherwise says so once and runs the host executor.
engine::Backend usable_backend(const std::string& requested) {
  if (requested != "cuda") return engine::Backend::host;
  std::string reason;
  if (engine::cuda_device_available(&reason)) return engine::Backend::cuda;
  fmt::print(stderr, "tapdiff: no CUDA device ({}); running the host executor instead\n", reason);
  return engine::Backend::host;
}

}  // namespace

void add_run_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("run", "Run a model through the reference or the engine and record a trace");
  auto o = std::make_shared<RunOptions>();
  cmd->add_option("--backend", o->backend, "reference | host | cuda")
      ->check(CLI::IsMember({"reference", "host", "cuda"}))->capture_default_str();
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--tokens", o->tokens, "Prompt token ids, e.g. 1,403,407");
  cmd->add_option("--prompt", o->prompt, "Prompt text (needs the model's tokenizer)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--precision", o->precision, "reference: f32 | f64; engine: f32 | f16 | bf16")
      ->capture_default_str();
  cmd->add_option("--inject", o->inject, "Engine fault to inject (see `tapdiff faults`)");
  cmd->add_option("--taps", o->taps, "Tap name globs, e.g. 'blk.*.attn_q*,output' ('!' excludes)");
  cmd->add_option("--layers", o->layers, "Layer ranges, e.g. 0-3,7");
  cmd->add_option("--positions", o->positions, "Position ranges, e.g. 0-15");
  cmd->add_option("-o,--output", o->output, "Trace file to write (.h5)");
  cmd->add_flag("--compress", o->compress, "gzip+shuffle the trace datasets (much slower)");
  cmd->add_option("--temperature", o->sampling.temperature, "Sampling temperature (0: greedy)");
  cmd->add_option("--top-k", o->sampling.top_k, "Sample among the k most likely tokens");
  cmd->add_option("--top-p", o->sampling.top_p, "Nucleus sampling mass");
  cmd->add_option("--seed", o->sampling.seed, "Sampling seed");

  cmd->callback([o, set_exit] {
    const GgufFile file = GgufFile::open(o->model);
    const ModelConfig config = load_model_config(file);
    const std::vector<int> prompt = prompt_tokens(*o);
    check_vocab(prompt, config, o->model);
    const bool reference = o->backend == "reference";
    const engine::Backend backend = usable_backend(o->backend);
    const Producer producer = reference                           ? Producer::reference
                              : backend == engine::Backend::cuda ? Producer::engine_cuda
                                                                 : Producer::engine_host;
    auto trace = open_trace(*o, config, producer, prompt);
    TraceWriter* writer = trace ? &*trace : nullptr;
    const std::vector<int> tokens = reference ? run_reference(*o, file, prompt, writer)
                                              : run_engine(*o, file, prompt, backend, writer);
    if (trace) trace->close();
    fmt::print("tokens: {}\n", fmt::join(tokens, ","));
    if (trace) fmt::print("trace: {}\n", o->output);
    set_exit(0);
  });
}

}  // namespace tapdiff
