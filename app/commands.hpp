// Each subcommand registers itself on the CLI11 app; its callback parses nothing further and
// calls library code. Callbacks return their exit code through `set_exit`.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace tapdiff {

class GgufFile;

using SetExit = std::function<void(int)>;

// --tokens / --prompt, shared by run, check and demo.
struct PromptOptions {
  std::string tokens;
  std::string text;
};
void add_prompt_options(CLI::App& cmd, PromptOptions& prompt);
// --prompt TEXT goes through the model's tokenizer.
std::vector<int> prompt_tokens(const PromptOptions& prompt, const GgufFile& model);
std::vector<int> prompt_tokens(const PromptOptions& prompt, const std::string& model);
// The tokens as printable text; "" when the model's tokenizer is not supported.
std::string decoded_text(const std::vector<int>& tokens, const GgufFile& model);

void add_fixture_command(CLI::App& app, SetExit set_exit);
void add_inspect_command(CLI::App& app, SetExit set_exit);
void add_run_command(CLI::App& app, SetExit set_exit);
void add_tokenize_command(CLI::App& app, SetExit set_exit);
void add_diff_command(CLI::App& app, SetExit set_exit);
void add_check_command(CLI::App& app, SetExit set_exit);
void add_demo_command(CLI::App& app, SetExit set_exit);
void add_faults_command(CLI::App& app, SetExit set_exit);
void add_selftest_command(CLI::App& app, SetExit set_exit);
void add_golden_command(CLI::App& app, SetExit set_exit);
void add_bisect_command(CLI::App& app, SetExit set_exit);
void add_import_command(CLI::App& app, SetExit set_exit);
void add_repro_commands(CLI::App& app, SetExit set_exit);  // repro and replay

}  // namespace tapdiff
