// `tapdiff inspect FILE`: a GGUF model's metadata, tensors and derived config.
#include <fmt/format.h>

#include "app/commands.hpp"
#include "model/describe.hpp"
#include "model/gguf.hpp"

namespace tapdiff {

void add_inspect_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("inspect", "Show what a GGUF model file holds");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "A .gguf model")->required();
  cmd->add_flag("--json", *json, "Machine-readable JSON");
  cmd->callback([path, json, set_exit] {
    const GgufFile file = GgufFile::open(*path);
    if (*json)
      fmt::print("{}\n", describe_gguf_json(file).dump(2));
    else
      fmt::print("{}", describe_gguf_text(file));
    set_exit(0);
  });
}

}  // namespace tapdiff
