// `tapdiff check`: the regression check. Runs the engine and the reference (or reads a golden
// trace) on the same model and tokens, diffs, reports; exit 0 pass, 1 diverged, 2 bad input.
#include <filesystem>
#include <limits>
#include <fmt/format.h>
#include <unistd.h>

#include "app/commands.hpp"
#include "app/corpus.hpp"
#include "app/exit_codes.hpp"
#include "app/golden.hpp"
#include "app/harness.hpp"
#include "app/invariance.hpp"
#include "app/report_output.hpp"
#include "diff/compare.hpp"
#include "diff/repeats.hpp"

namespace tapdiff {

void add_check_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("check", "Run the engine against the reference (or a golden trace) and diff");
  struct Options {
    RunSpec engine;
    PromptOptions prompt;
    std::string golden, profile, keep;
    int repeat = 1;
    bool invariance = false;
    std::vector<int> chunks = kInvarianceChunks;
    CorpusOptions corpus;
    diff::CorpusGate gate;
    ReportOutput report;
  };
  auto o = std::make_shared<Options>();
  o->engine.backend = "host";
  RunSpec& e = o->engine;
  cmd->add_option("-m,--model", e.model, "GGUF model (default with --golden: the golden trace's model)");
  add_prompt_options(*cmd, o->prompt);
  cmd->add_option("-n,--n-predict", e.n_predict, "Tokens to generate")->capture_default_str();
  cmd->add_option("--backend", e.backend, "The engine checked: host | cuda | llama.cpp | transformers")
      ->check(CLI::IsMember({"host", "cuda", "llama.cpp", "transformers"}))
      ->capture_default_str();
  cmd->add_option("--precision", e.precision, "Engine precision: f32 | f16 | bf16 | q8")->capture_default_str();
  cmd->add_option("--inject", e.fault, "Engine fault to inject (see `tapdiff faults`)");
  auto* taps = cmd->add_option("--taps", e.taps.names,
                               "Tap name globs both runs record, e.g. '!*.attn.probs' for a long prompt (the "
                               "attention summary stays)");
  cmd->add_option("--golden", o->golden, "Diff against this trace instead of running the reference")
      ->excludes(taps);
  cmd->add_option("--profile", o->profile, "Tolerance profile: f32, f16, bf16, q8 or a JSON file");
  cmd->add_option("--keep-traces", o->keep, "Keep the traces in this directory");
  cmd->add_option("--repeat", o->repeat,
                  "Run the engine N times: runs that disagree are reported as nondeterministic first")
      ->check(CLI::Range(1, 100))->capture_default_str();
  cmd->add_option("--prefill-chunk", e.prefill_chunk, "Engine: prompt tokens per prefill step (0: the whole prompt)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))->capture_default_str();
  auto* invariance = cmd->add_flag("--invariance", o->invariance,
                                   "Instead of the reference: the engine prefilling its prompt in one batch against "
                                   "the same engine prefilling it in chunks (--chunks)");
  cmd->add_option("--chunks", o->chunks, "With --invariance: the chunk sizes (1: token by token)")
      ->delimiter(',')->capture_default_str()->needs(invariance);
  invariance->excludes("--golden")->excludes("--prefill-chunk")->excludes("--repeat");
  auto* corpus = cmd->add_option("--corpus", o->corpus.file,
                                 "Instead of one prompt: this text (.txt) or token file (.tokens) in windows, "
                                 "logits only, scored as llama-perplexity --kl-divergence");
  corpus->excludes("--golden")->excludes(invariance)->excludes("--tokens")->excludes("--prompt")->excludes("--repeat")
      ->excludes(taps);
  cmd->add_option("--window", o->corpus.window, "With --corpus: tokens per window (the second half is scored)")
      ->capture_default_str()->needs(corpus);
  cmd->add_option("--max-windows", o->corpus.max_windows, "With --corpus: score at most this many windows (0: all)")
      ->capture_default_str()->needs(corpus);
  cmd->add_option("--max-kld-mean", o->gate.max_kld_mean, "With --corpus: the largest mean KL divergence that passes")
      ->needs(corpus);
  cmd->add_option("--max-kld-99", o->gate.max_kld_99, "With --corpus: the largest 99th-percentile KL divergence")
      ->needs(corpus);
  cmd->add_option("--min-same-top", o->gate.min_same_top, "With --corpus: the smallest same-top-token rate (0..1)")
      ->needs(corpus);
  cmd->add_option("--max-ppl-ratio", o->gate.max_ppl_ratio, "With --corpus: the largest PPL(engine) / PPL(reference)")
      ->needs(corpus);
  add_report_options(*cmd, o->report);

  cmd->callback([o, cmd, set_exit] {
    namespace fs = std::filesystem;
    const fs::path dir = o->keep.empty() ? fs::temp_directory_path() / fmt::format("tapdiff-check-{}", getpid())
                                         : fs::path(o->keep);
    fs::create_directories(dir);
    // The temporary traces go also when the check fails with an error (exit 2).
    struct RemoveTemporary {
      fs::path dir;
      ~RemoveTemporary() {
        std::error_code ignored;
        if (!dir.empty()) fs::remove_all(dir, ignored);
      }
    } temporary{o->keep.empty() ? dir : fs::path()};
    RunSpec engine = o->engine;
    diff::DiffOptions options;
    if (!o->profile.empty()) options.profile = load_profile_option(o->profile);
    options.model_path = engine.model;
    if (!o->corpus.file.empty()) {
      if (engine.model.empty()) throw std::invalid_argument("--model: required with --corpus");
      const diff::CorpusReport report = run_corpus(engine, o->corpus, o->gate, dir.string(), !o->keep.empty());
      write_corpus_reports(report, o->report);
      set_exit(report.failures.empty() ? kExitPass : kExitDiverged);
      return;
    }
    if (o->invariance) {
      if (engine.model.empty()) throw std::invalid_argument("--model: required with --invariance");
      engine.prompt = prompt_tokens(o->prompt, engine.model);
      const InvarianceResult chunked = run_invariance(engine, o->chunks, options, dir.string());
      set_exit(write_invariance_reports(chunked, o->report));
      if (!o->keep.empty()) fmt::print(stderr, "traces: {} (one batch) and chunk-<n>.h5 beside it\n", chunked.one_batch_trace);
      return;
    }
    std::string expected;
    if (!o->golden.empty()) {
      // The golden says which model (checked by sha256), tokens and taps it was recorded with;
      // an engine golden also its precision, unless --precision overrides it.
      const Golden golden = read_golden(o->golden, engine.model);
      const RunSpec inputs = golden_inputs(golden);
      engine.model = inputs.model;
      engine.prompt = inputs.prompt;
      engine.n_predict = inputs.n_predict;
      engine.taps = inputs.taps;
      const bool engine_golden = golden.metadata.producer == Producer::engine_host ||
                                 golden.metadata.producer == Producer::engine_cuda;
      if (engine_golden && cmd->count("--precision") == 0) engine.precision = inputs.precision;
      expected = o->golden;
    } else {
      if (engine.model.empty()) throw std::invalid_argument("--model: required without --golden");
      engine.prompt = prompt_tokens(o->prompt, engine.model);
      RunSpec reference;
      reference.model = engine.model;
      reference.prompt = engine.prompt;
      reference.n_predict = engine.n_predict;
      reference.taps = engine.taps;
      reference.trace = (dir / "reference.h5").string();
      run_model(reference);
      expected = reference.trace;
    }
    engine.trace = (dir / "engine.h5").string();
    run_model(engine);
    const auto nondeterminism = repeat_engine(engine, o->repeat);
    diff::DiffResult result = diff::diff_traces(expected, engine.trace, options);
    if (nondeterminism) diff::put_nondeterminism_first(nondeterminism->first, nondeterminism->second, result);
    write_reports(result, o->report);
    if (!o->keep.empty()) fmt::print(stderr, "traces: {} {}\n", expected, engine.trace);
    set_exit(exit_code_for(result));
  });
}

}  // namespace tapdiff
