// `tapdiff demo`: the whole story, on a real GGUF (--model) or else on a generated fixture. A
// clean engine run passes; the same engine with a KV-cache bug diverges, and the diff says
// where and why; reports are written.
#include <filesystem>
#include <fmt/format.h>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/harness.hpp"
#include "app/repro.hpp"
#include "app/report_output.hpp"
#include "diff/compare.hpp"
#include "fixtures/tiny_model.hpp"
#include "model/config.hpp"
#include "model/gguf.hpp"

namespace tapdiff {
namespace {

void banner(const std::string& text) { fmt::print("\n── {} {}\n\n", text, std::string(std::max<std::size_t>(3, 76 - text.size()), '-')); }

constexpr const char* kRealModelPrompt = "Once upon a time";

struct DemoOptions {
  std::string out = "build/demo";
  std::string fault = "kv-stuck-length";
  std::string model;  // "" = generate a fixture
  PromptOptions prompt;
  int n_predict = 16;
};

// The fixture the demo runs when no model is given; returns its path.
std::string write_demo_fixture(const std::string& out) {
  const std::string model = out + "/tiny-qwen2.gguf";
  FixtureSpec spec;
  spec.arch = Arch::qwen2;
  spec.n_layer = 4;
  spec.weight_type = GgmlType::Q8_0;
  spec.seed = 7;
  write_fixture(spec, model);
  fmt::print("model: {} (generated: qwen2, {} layers, n_embd {}, GQA {}/{}, Q8_0 weights)\n", model, spec.n_layer,
             spec.n_embd, spec.n_head, spec.n_head_kv);
  return model;
}

void describe_real_model(const std::string& model) {
  const ModelConfig c = load_model_config(GgufFile::open(model));
  fmt::print("model: {} ({}, {} layers, n_embd {}, GQA {}/{}, vocab {})\n", model, arch_name(c.arch), c.n_layer,
             c.n_embd, c.n_head, c.n_head_kv, c.n_vocab);
}

// The prompt: --tokens or --prompt when given; else fixed ids on the fixture, or a short text
// through the real model's tokenizer.
std::vector<int> demo_prompt(const DemoOptions& o, const std::string& model) {
  if (!o.prompt.tokens.empty() || !o.prompt.text.empty()) return prompt_tokens(o.prompt, model);
  if (o.model.empty()) return {1, 70, 200, 33, 5, 90, 12, 140};
  PromptOptions text;
  text.text = kRealModelPrompt;
  return prompt_tokens(text, model);
}

}  // namespace

void add_demo_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand(
      "demo", "The end-to-end story on a real GGUF (--model) or a generated one: PASS, then a bug found and diagnosed");
  auto o = std::make_shared<DemoOptions>();
  cmd->add_option("--out", o->out, "Directory for the model, traces and reports")->capture_default_str();
  cmd->add_option("--inject", o->fault, "The engine bug to demonstrate")->capture_default_str();
  cmd->add_option("-m,--model", o->model, "A real GGUF model (llama or qwen2) instead of the generated fixture");
  add_prompt_options(*cmd, o->prompt);
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate")->capture_default_str();
  cmd->callback([o, set_exit] {
    namespace fs = std::filesystem;
    fs::create_directories(o->out);
    std::string model = o->model;
    if (model.empty())
      model = write_demo_fixture(o->out);
    else
      describe_real_model(model);

    RunSpec reference;
    reference.model = model;
    reference.prompt = demo_prompt(*o, model);
    reference.n_predict = o->n_predict;
    reference.trace = o->out + "/reference.h5";
    const std::vector<int> tokens = run_model(reference);
    if (!o->model.empty())
      if (const std::string text = decoded_text(tokens, GgufFile::open(model)); !text.empty())
        fmt::print("reference, greedy: {}\n", text);

    banner("1. the engine as it should be: tapdiff check");
    RunSpec engine = reference;
    engine.backend = "host";
    engine.trace = o->out + "/engine-clean.h5";
    run_model(engine);
    ReportOutput quiet;
    const auto clean = diff::diff_traces(reference.trace, engine.trace);
    write_reports(clean, quiet);

    banner(fmt::format("2. the same engine with a bug: --inject {}", o->fault));
    engine.fault = o->fault;
    engine.trace = o->out + "/engine-" + o->fault + ".h5";
    run_model(engine);
    ReportOutput files;
    files.files = {o->out + "/report.html", o->out + "/report.md"};
    const auto buggy = diff::diff_traces(reference.trace, engine.trace);
    write_reports(buggy, files);
    fmt::print("\nOpen {}/report.html in a browser for the heatmaps and the logits side by side.\n", o->out);

    banner("3. from finding to fix: tapdiff repro, then tapdiff replay");
    ReproOptions repro;
    repro.expected = reference.trace;
    repro.actual = engine.trace;
    repro.dir = o->out + "/repro";
    fs::remove_all(repro.dir);
    const ReproWritten written = write_repro(repro);
    fmt::print("{} @ {}: {}/ holds stages {}..{} of the model and the op's inputs; no model needed\n", written.tap,
               written.position, repro.dir, written.first_stage, written.last_stage);
    const ReplayOutcome buggy_replay = replay_repro(repro.dir, std::nullopt);
    const ReplayOutcome fixed_replay = replay_repro(repro.dir, std::string("none"));
    fmt::print("tapdiff replay {}:               {}", repro.dir, buggy_replay.text);
    fmt::print("tapdiff replay {} --inject none: {}", repro.dir, fixed_replay.text);
    const bool story = clean.verdict == diff::Verdict::pass && buggy.verdict == diff::Verdict::diverged &&
                       buggy_replay.diverged && !fixed_replay.diverged;
    set_exit(story ? kExitPass : kExitDiverged);
  });
}

}  // namespace tapdiff
