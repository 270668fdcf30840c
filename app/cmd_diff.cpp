// `tapdiff diff A.h5 B.h5`: where B first stops computing what A computes, and why.
#include <fmt/format.h>
#include <fstream>
#include <unistd.h>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/report_output.hpp"
#include "diff/compare.hpp"

namespace tapdiff {

void add_diff_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("diff", "Compare two traces: first divergence and diagnosis");
  struct Options {
    std::string expected, actual, profile, model;
    ReportOutput report;
    bool no_diagnosis = false, all = false, lockstep = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("expected", o->expected, "Expected trace (usually the reference)")->required();
  cmd->add_option("actual", o->actual, "Actual trace (usually the engine)")->required();
  cmd->add_option("--profile", o->profile,
                  "Tolerance profile: f32, f16, bf16, q8 or a JSON file (default: the traces' precisions, the looser)");
  cmd->add_option("--model", o->model, "GGUF for hypothesis replay (default: the expected trace's model_path)");
  cmd->add_flag("--no-diagnosis", o->no_diagnosis, "Skip hypothesis replay");
  cmd->add_flag("--all", o->all, "Every divergence, grouped by independent root (not only the first)");
  cmd->add_flag("--lockstep", o->lockstep,
                "The actual trace is a lockstep run: every tap over tolerance, grouped by op "
                "(automatic when its metadata says so)");
  add_report_options(*cmd, o->report);
  cmd->callback([o, set_exit] {
    diff::DiffOptions options;
    if (!o->profile.empty()) options.profile = load_profile_option(o->profile);
    options.model_path = o->model;
    options.diagnose = !o->no_diagnosis;
    options.all = o->all;
    options.lockstep = o->lockstep;
    const diff::DiffResult result = diff::diff_traces(o->expected, o->actual, options);
    write_reports(result, o->report);
    set_exit(exit_code_for(result));
  });
}

}  // namespace tapdiff
