// `tapdiff run`: run a model through the reference or the engine, optionally tracing taps.
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/harness.hpp"
#include "app/token_list.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "reports/escape.hpp"

namespace tapdiff {

void add_prompt_options(CLI::App& cmd, PromptOptions& p) {
  cmd.add_option("--tokens", p.tokens, "Prompt token ids, e.g. 1,403,407");
  cmd.add_option("--prompt", p.text, "Prompt text (needs the model's tokenizer)");
}

namespace {

// The ids of --tokens; nullopt for --prompt, which needs the tokenizer.
std::optional<std::vector<int>> given_ids(const PromptOptions& p) {
  if (!p.text.empty() && !p.tokens.empty())
    throw std::invalid_argument("--prompt and --tokens: give one of them, not both");
  if (!p.text.empty()) return std::nullopt;
  if (p.tokens.empty()) throw std::invalid_argument("--tokens: expected token ids (e.g. --tokens 1,2,3) or --prompt TEXT");
  return parse_token_list(p.tokens);
}

}  // namespace

std::vector<int> prompt_tokens(const PromptOptions& p, const GgufFile& model) {
  if (auto ids = given_ids(p)) return *std::move(ids);
  return Tokenizer::from_gguf(model).encode(p.text);
}

std::vector<int> prompt_tokens(const PromptOptions& p, const std::string& model) {
  if (auto ids = given_ids(p)) return *std::move(ids);
  return Tokenizer::from_gguf(GgufFile::open(model)).encode(p.text);
}

// The tokens as printable text (invalid UTF-8 replaced), when the model's tokenizer is supported.
std::string decoded_text(const std::vector<int>& tokens, const GgufFile& model) {
  try {
    return reports::clean_utf8(Tokenizer::from_gguf(model).decode(tokens));
  } catch (const std::exception&) {
    return {};
  }
}

void add_tokenize_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids and pieces of a text under a model's tokenizer");
  auto model = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  cmd->add_option("model", *model, "GGUF model")->required();
  cmd->add_option("text", *text, "Text to tokenize")->required();
  cmd->callback([model, text, set_exit] {
    const Tokenizer t = Tokenizer::from_gguf(GgufFile::open(*model));
    const std::vector<int> ids = t.encode(*text);
    fmt::print("ids: {}\n", fmt::join(ids, ","));
    for (int id : ids) fmt::print("{:>8}  {}\n", id, t.piece(id));
    set_exit(0);
  });
}

void add_run_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("run", "Run a model through the reference or the engine and record a trace");
  struct Options {
    RunSpec spec;
    PromptOptions prompt;
    int repeat = 1;
  };
  auto o = std::make_shared<Options>();
  RunSpec& s = o->spec;
  cmd->add_option("--backend", s.backend, "reference | host | cuda | llama.cpp | transformers")
      ->check(CLI::IsMember({"reference", "host", "cuda", "llama.cpp", "transformers"}))->capture_default_str();
  cmd->add_option("-m,--model", s.model, "GGUF model")->required();
  add_prompt_options(*cmd, o->prompt);
  cmd->add_option("-n,--n-predict", s.n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--precision", s.precision, "reference: f32 | f64; engine: f32 | f16 | bf16 | q8")
      ->capture_default_str();
  cmd->add_option("--inject", s.fault, "Engine faults to inject, comma-separated (see `tapdiff faults`)");
  cmd->add_option("--lockstep", s.lockstep,
                  "Engine: at every tap record the engine's value, then continue from this trace's "
                  "(model and tokens come from it)");
  cmd->add_option("--prefill-chunk", s.prefill_chunk, "Engine: prompt tokens per prefill step (0: the whole prompt)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))->capture_default_str();
  cmd->add_option("--taps", s.taps.names, "Tap name globs, e.g. 'blk.*.attn_q*,output' ('!' excludes)");
  cmd->add_option("--layers", s.taps.layers, "Layer ranges, e.g. 0-3,7");
  cmd->add_option("--positions", s.taps.positions, "Position ranges, e.g. 0-15");
  cmd->add_option("-o,--output", s.trace, "Trace file to write (.h5)");
  cmd->add_option_function<std::string>(
         "--logits", [&s](const std::string& v) { s.logits_all = v == "all"; },
         "Record the logits (`output`) at the last prompt position (last) or at every one (all)")
      ->check(CLI::IsMember({"last", "all"}))->default_str("last");
  auto* llama = cmd->add_option_group("llama.cpp", "Options of --backend llama.cpp");
  llama->add_option("--llama-kv-type", s.llama.kv_type, "K and V cache type: f32, f16, bf16, q8_0, q4_0, ...")
      ->capture_default_str();
  llama->add_flag("--llama-flash-attn", s.llama.flash_attn, "Fused flash attention (attn.probs is then not available)");
  llama->add_option("--llama-override", s.llama.overrides,
                    "Override a GGUF key as llama.cpp's --override-kv does: KEY=TYPE:VALUE, TYPE int|float|bool|str "
                    "(repeatable)");
  llama->add_option("--threads", s.llama.threads, "llama.cpp threads (0: every core)")->capture_default_str();
  CLI::Option* weights = cmd->add_option("--weights", s.weights,
                  "Record every weight as the program uses it: full | stats | auto (--weights alone: "
                  "auto, stats above --weights-stats-above parameters)")
      ->expected(0, 1)->check(CLI::IsMember({"full", "stats", "auto"}));
  cmd->add_option("--weights-stats-above", s.weights_stats_above,
                  "Parameters above which --weights auto records per-row statistics")
      ->capture_default_str();
  cmd->add_flag("--compress", s.compress, "gzip+shuffle the trace datasets (much slower)");
  cmd->add_option("--temperature", s.sampling.temperature, "Sampling temperature (0: greedy; reference only)");
  cmd->add_option("--top-k", s.sampling.top_k, "Sample among the k most likely tokens");
  cmd->add_option("--top-p", s.sampling.top_p, "Nucleus sampling mass");
  cmd->add_option("--seed", s.sampling.seed, "Sampling seed");
  CLI::Option* weight_cache = cmd->add_option("--weight-cache", s.weight_cache_mib,
                  "Reference: MiB of float32 weight matrices kept decoded; the rest are dequantized on each use")
      ->check(CLI::Range(std::uint64_t{0}, RunSpec::kMaxWeightCacheMib))->capture_default_str();
  cmd->add_option("--repeat", o->repeat,
                  "Run N times and compare the traces: exit 1 naming the first tap where the runs disagree")
      ->check(CLI::Range(1, 100))->capture_default_str();

  cmd->callback([o, weights, llama, weight_cache, set_exit] {
    if (weights->count() > 0 && o->spec.weights.empty()) o->spec.weights = "auto";
    if (llama->count_all() > 0 && o->spec.backend != "llama.cpp")
      throw std::invalid_argument("--llama-*, --threads: options of --backend llama.cpp, not of " + o->spec.backend);
    if (weight_cache->count() > 0 && o->spec.backend != "reference")
      throw std::invalid_argument("--weight-cache: an option of --backend reference, not of " + o->spec.backend +
                                  " (the engine keeps its weights in their GGUF encoding)");
    const bool prompt_given = !o->prompt.tokens.empty() || !o->prompt.text.empty();
    const GgufFile model = GgufFile::open(o->spec.model);
    if (o->spec.lockstep.empty() || prompt_given) o->spec.prompt = prompt_tokens(o->prompt, model);
    const std::vector<int> tokens = run_model(o->spec, model);
    fmt::print("tokens: {}\n", fmt::join(tokens, ","));
    if (const std::string text = decoded_text(tokens, model); !text.empty()) fmt::print("text: {}\n", text);
    if (!o->spec.trace.empty()) fmt::print("trace: {}\n", o->spec.trace);
    if (o->repeat > 1) {
      if (o->spec.trace.empty()) throw std::invalid_argument("--repeat: needs -o (the runs are compared by their traces)");
      if (const auto differ = repeat_engine(o->spec, o->repeat)) {
        const auto& [at, k] = *differ;
        fmt::print("nondeterministic: run 1 and run {} differ first at {} position {} (max abs {:.3g}); run {}'s "
                   "trace: {}.repeat{}.h5\n",
                   k, at.tap, at.position, at.metrics.max_abs, k, o->spec.trace, k);
        set_exit(kExitDiverged);
        return;
      }
      fmt::print("repeats: {} runs recorded identical traces\n", o->repeat);
    }
    set_exit(0);
  });
}

}  // namespace tapdiff
