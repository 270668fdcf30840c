// tapdiff: differential debugging of LLM inference engines. Thin: parse, call, exit code.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <fmt/format.h>

#include "app/commands.hpp"
#include "app/exit_codes.hpp"
#include "app/git_commit.hpp"
#include "model/error.hpp"
#include "tapdiff/trace_error.hpp"

int main(int argc, char** argv) {
  using namespace tapdiff;
  CLI::App app{"tapdiff: find where an inference engine first stops computing what the model "
               "says, and why"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string(TAPDIFF_VERSION " (") + git_commit() + ")");
  int exit_code = kExitPass;
  const SetExit set_exit = [&](int code) { exit_code = code; };
  add_fixture_command(app, set_exit);
  add_inspect_command(app, set_exit);
  add_run_command(app, set_exit);
  add_tokenize_command(app, set_exit);
  add_diff_command(app, set_exit);
  add_check_command(app, set_exit);
  add_demo_command(app, set_exit);
  add_faults_command(app, set_exit);
  add_selftest_command(app, set_exit);
  add_golden_command(app, set_exit);
  add_bisect_command(app, set_exit);
  add_import_command(app, set_exit);
  add_repro_commands(app, set_exit);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help, version or the usage error
    return code == 0 ? kExitPass : kExitInputError;
  } catch (const InputError& e) {
    fmt::print(stderr, "tapdiff: error: {}\n", e.what());
    return kExitInputError;
  } catch (const TraceError& e) {
    fmt::print(stderr, "tapdiff: error: {}\n", e.what());
    return kExitInputError;
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "tapdiff: error: {}\n", e.what());
    return kExitInputError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tapdiff: internal error: {}\n", e.what());
    return kExitCannotTest;
  }
  return exit_code;
}
