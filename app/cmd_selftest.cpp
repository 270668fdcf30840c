// `tapdiff selftest` and `tapdiff faults`: the fault catalogue, and the proof that the diff
// localizes and classifies every fault.
#include <filesystem>
#include <unistd.h>
#include <fmt/format.h>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/progress.hpp"
#include "app/selftest.hpp"
#include "engine/faults.hpp"

namespace tapdiff {

void add_faults_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("faults", "List the engine faults that --inject reproduces");
  cmd->callback([set_exit] {
    for (const auto& f : engine::fault_catalogue())
      fmt::print("{:<28} {:<16} {}\n{:<28} {:<16} seed bug: {}\n", f.name, f.fault_class, f.description, "", "",
                 f.seed_bug);
    set_exit(kExitPass);
  });
}

void add_selftest_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("selftest", "Inject every fault, diff against the reference, check the finding");
  auto o = std::make_shared<SelftestOptions>();
  auto dir = std::make_shared<std::string>();
  cmd->add_option("--model", o->models, "Run on these GGUF models instead of the generated ones (repeatable)");
  cmd->add_option("--precision", o->precisions, "Engine precisions (repeatable)")->capture_default_str();
  cmd->add_option("--fault", o->faults, "Only these faults (repeatable)");
  cmd->add_option("--backend", o->backend, "host | cuda")->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--taps", o->taps,
                  "Tap names both runs record, as `run --taps` takes them (e.g. '!*.attn.probs': attention "
                  "checked on attn.probs.summary alone)");
  cmd->add_option("--work-dir", *dir, "Where models and traces go (default: a temporary directory)");
  cmd->callback([o, dir, set_exit] {
    namespace fs = std::filesystem;
    const bool temporary = dir->empty();
    o->work_dir = temporary ? (fs::temp_directory_path() / fmt::format("tapdiff-selftest-{}", ::getpid())).string()
                            : *dir;
    Progress progress("selftest");
    o->on_progress = [&](int done, int total) { progress.update(done, total); };
    const auto rows = run_selftest(*o);
    progress.finish();
    fmt::print("{}", selftest_table(rows));
    if (temporary) fs::remove_all(o->work_dir);
    bool ok = true;
    for (const auto& r : rows) ok = ok && r.ok;
    set_exit(ok ? kExitPass : kExitDiverged);
  });
}

}  // namespace tapdiff
