// `tapdiff import DIR --map MAP.json -o TRACE.h5`: another program's tensor dumps (.npy,
// .safetensors) into a trace, through a name map (adapters/import_dumps.hpp).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "adapters/import_dumps.hpp"
#include "app/commands.hpp"

namespace tapdiff {

void add_import_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("import", "Turn a directory of tensor dumps (.npy, .safetensors) into a trace");
  struct Options {
    std::string dir, map, output;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("dir", o->dir, "Directory of .npy / .safetensors files")->required();
  cmd->add_option("--map", o->map, "JSON name map: tokens, taps {pattern: tap} (see docs/guide.md)")->required();
  cmd->add_option("-o,--output", o->output, "Trace file to write (.h5)")->required();
  cmd->callback([o, set_exit] {
    const adapters::ImportResult r = adapters::import_dumps(o->dir, o->map, o->output);
    fmt::print("trace: {} ({} taps, {} positions)\n", o->output, r.taps, r.positions);
    for (const auto& line : r.aligned) fmt::print("aligned {}\n", line);
    if (!r.unmapped.empty()) fmt::print("not mapped: {}\n", fmt::join(r.unmapped, ", "));
    set_exit(0);
  });
}

}  // namespace tapdiff
