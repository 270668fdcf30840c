// Each subcommand registers itself on the CLI11 app; its callback parses nothing further and
// calls library code. Callbacks return their exit code through `set_exit`.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tapdiff {

using SetExit = std::function<void(int)>;

void add_fixture_command(CLI::App& app, SetExit set_exit);
void add_inspect_command(CLI::App& app, SetExit set_exit);
void add_run_command(CLI::App& app, SetExit set_exit);
void add_diff_command(CLI::App& app, SetExit set_exit);

}  // namespace tapdiff
