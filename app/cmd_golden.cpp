// `tapdiff golden update`: regenerate golden traces deliberately. Re-runs each golden's
// producer on its model and tokens, prints what changed and by how much, and overwrites only
// with --write (the default is a dry run). Exit 0: nothing changed, or every change written;
// 1: changes found and not written; 2: bad input.
#include <filesystem>
#include <fmt/format.h>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/golden.hpp"
#include "diff/compare.hpp"
#include "model/error.hpp"

namespace tapdiff {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kListedTaps = 20;

// Removes the regenerated trace unless it was moved over the golden.
struct TempTrace {
  std::string path;
  ~TempTrace() {
    std::error_code ignored;
    fs::remove(path, ignored);
  }
};

void print_changes(const GoldenChanges& c, const diff::DiffResult& result) {
  if (!c.any()) {
    fmt::print("  unchanged: {} taps and {} tokens bit-identical\n", c.taps_compared, c.new_tokens.size());
    return;
  }
  if (!c.changed.empty()) {
    fmt::print("  changed: {} of {} taps; first differing tap: {}\n", c.changed.size(), c.taps_compared,
               c.changed.front().tap);
    fmt::print("  {:<28} {:>11} {:>11}\n", "tap", "max NMSE", "max abs");
    for (std::size_t i = 0; i < c.changed.size() && i < kListedTaps; ++i) {
      const TapChange& t = c.changed[i];
      if (t.structural.empty()) fmt::print("  {:<28} {:>11.3e} {:>11.3e}\n", t.tap, t.max_nmse, t.max_abs);
      else fmt::print("  {:<28} {}\n", t.tap, t.structural);
    }
    if (c.changed.size() > kListedTaps) fmt::print("  ... and {} more\n", c.changed.size() - kListedTaps);
  }
  if (c.tokens_changed()) {
    std::size_t p = 0;
    while (p < c.old_tokens.size() && p < c.new_tokens.size() && c.old_tokens[p] == c.new_tokens[p]) ++p;
    auto at = [](const std::vector<std::int32_t>& t, std::size_t i) {
      return i < t.size() ? std::to_string(t[i]) : std::string("(none)");
    };
    fmt::print("  tokens: changed at position {}: {} -> {}\n", p, at(c.old_tokens, p), at(c.new_tokens, p));
  }
  if (result.first)
    fmt::print("  beyond the {} tolerance profile: first divergence {} at position {}\n", result.profile,
               result.first->tap, result.first->position);
  else
    fmt::print("  within the {} tolerance profile\n", result.profile);
}

}  // namespace

void add_golden_command(CLI::App& app, SetExit set_exit) {
  auto* group = app.add_subcommand("golden", "Manage golden traces (the references `check --golden` uses)");
  group->require_subcommand(1);
  auto* cmd = group->add_subcommand(
      "update", "Re-run each golden's producer on its model and tokens; print what changed; overwrite with --write");
  struct Options {
    std::vector<std::string> goldens;
    std::string model, model_dir;
    bool write = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("goldens", o->goldens, "Golden traces (.h5)")->required();
  cmd->add_option("-m,--model", o->model, "The model (only with one golden; default: the recorded model_path)");
  cmd->add_option("--model-dir", o->model_dir, "Look for each golden's model by file name in this folder");
  cmd->add_flag("--write", o->write, "Overwrite the goldens that changed (default: dry run, print only)");

  cmd->callback([o, set_exit] {
    if (!o->model.empty() && o->goldens.size() != 1)
      throw std::invalid_argument(
          fmt::format("--model: names one model, but {} goldens were given (use --model-dir)", o->goldens.size()));
    bool pending = false;
    for (const auto& golden : o->goldens) {
      RunSpec spec = golden_rerun_spec(golden, read_golden(golden, o->model, o->model_dir));
      TempTrace fresh{golden + ".new"};
      spec.trace = fresh.path;
      spec.compress = true;  // goldens live in repositories: small files
      fmt::print("{} ({}, {}, {} tokens, {})\n", golden, spec.backend, spec.model,
                 spec.prompt.size() + std::size_t(spec.n_predict), spec.precision);
      std::fflush(stdout);
      run_model(spec);
      diff::DiffOptions options;
      options.diagnose = false;
      options.model_path = spec.model;
      const diff::DiffResult result = diff::diff_traces(golden, fresh.path, options);
      const GoldenChanges changes = golden_changes(result);
      print_changes(changes, result);
      if (!changes.any()) continue;
      if (!o->write) {
        fmt::print("  not written (dry run): pass --write to overwrite\n");
        pending = true;
        continue;
      }
      std::error_code error;
      fs::rename(fresh.path, golden, error);
      if (error) throw InputError(golden, "golden", fmt::format("cannot overwrite: {}", error.message()));
      fmt::print("  written\n");
    }
    set_exit(pending ? kExitDiverged : kExitPass);
  });
}

}  // namespace tapdiff
