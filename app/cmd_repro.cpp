// `tapdiff repro A.h5 B.h5 -o DIR` (or `repro REPORT.json -o DIR`) writes a standalone repro of
// a finding; `tapdiff replay DIR` runs it through this build's engine (app/repro.hpp).
#include <fmt/format.h>
#include <limits>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/repro.hpp"

namespace tapdiff {

void add_repro_commands(CLI::App& app, SetExit set_exit) {
  auto* repro = app.add_subcommand("repro", "Write a standalone repro of a finding: its op's inputs, the model part it "
                                            "runs in, an engine replay and a numpy replay");
  auto o = std::make_shared<ReproOptions>();
  auto traces = std::make_shared<std::vector<std::string>>();
  repro->add_option("traces", *traces, "EXPECTED.h5 ACTUAL.h5, or a JSON report of diff/check (--format json)")
      ->required()->expected(1, 2);
  repro->add_option("-o,--output", o->dir, "Directory to write (new or empty)")->required();
  repro->add_option("-m,--model", o->model, "GGUF model (default: the expected trace's)");
  repro->add_option("--root", o->root, "The k-th independent root of diff --all (1: the first finding)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))->capture_default_str();
  repro->callback([o, traces, set_exit] {
    if (traces->size() == 1) {
      o->report = traces->front();
    } else {
      o->expected = (*traces)[0];
      o->actual = (*traces)[1];
    }
    const ReproWritten w = write_repro(*o);
    fmt::print("repro: {} @ {} in {} (stages {}..{} of the model)\n", w.tap, w.position, o->dir, w.first_stage,
               w.last_stage);
    if (!w.reproduced)
      fmt::print("the actual trace is not tapdiff's engine's: run `python3 {}/repro.py`\n", o->dir);
    else if (*w.reproduced)
      fmt::print("replayed: the engine diverges again (`tapdiff replay {}` exits 1 until it is fixed)\n", o->dir);
    else
      fmt::print("replayed: the engine does NOT diverge on this part; the bug needs more than the model's weights and "
                 "the recorded inputs (README.md)\n");
    set_exit(kExitPass);
  });

  auto* replay = app.add_subcommand("replay", "Run a repro directory through this build's engine: exit 1 while the "
                                              "finding reproduces, 0 once it does not");
  auto dir = std::make_shared<std::string>();
  auto fault = std::make_shared<std::string>();
  replay->add_option("dir", *dir, "Directory written by `tapdiff repro`")->required();
  auto* inject = replay->add_option("--inject", *fault, "Engine faults instead of the run's (none: a clean engine)");
  replay->callback([dir, fault, inject, set_exit] {
    const ReplayOutcome r = replay_repro(*dir, inject->count() ? std::optional<std::string>(*fault) : std::nullopt);
    fmt::print("{}", r.text);
    set_exit(r.diverged ? kExitDiverged : kExitPass);
  });
}

}  // namespace tapdiff
