// `tapdiff inspect FILE`: a GGUF model's metadata, tensors and derived config, or a trace's
// metadata, tokens and taps.
#include <cstring>
#include <fmt/format.h>
#include <fstream>

#include "app/commands.hpp"
#include "model/describe.hpp"
#include "model/gguf.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_summary.hpp"

namespace tapdiff {
namespace {

bool is_hdf5(const std::string& path) {
  char magic[8] = {};
  std::ifstream(path, std::ios::binary).read(magic, sizeof(magic));
  return std::memcmp(magic, "\x89HDF\r\n\x1a\n", 8) == 0;
}

std::string trace_text(const nlohmann::json& j) {
  std::string out;
  for (const auto& [key, value] : j.items()) {
    if (key == "taps" || key == "tokens") continue;
    out += fmt::format("  {:<18} {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
  }
  if (j.contains("tokens")) out += fmt::format("  {:<18} {}\n", "tokens", j["tokens"].dump());
  if (j.contains("taps")) {
    out += fmt::format("\ntaps ({})\n", j["taps"].size());
    for (const auto& t : j["taps"]) {
      nlohmann::json rest = t;
      const std::string name = rest.value("full_name", rest.value("name", std::string("?")));
      rest.erase("full_name");
      rest.erase("name");
      out += fmt::format("  {:<24} {}\n", name, rest.dump());
    }
  }
  return out;
}

}  // namespace

void add_inspect_command(CLI::App& app, SetExit set_exit) {
  auto* cmd = app.add_subcommand("inspect", "Show what a GGUF model or a trace holds");
  auto path = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("file", *path, "A .gguf model or a .h5 trace")->required();
  cmd->add_flag("--json", *json, "Machine-readable JSON");
  cmd->callback([path, json, set_exit] {
    if (is_hdf5(*path)) {
      const nlohmann::json summary = trace_summary(TraceReader(*path));
      fmt::print("{}", *json ? summary.dump(2) + "\n" : fmt::format("{}\n{}", *path, trace_text(summary)));
    } else {
      const GgufFile file = GgufFile::open(*path);
      fmt::print("{}", *json ? describe_gguf_json(file).dump(2) + "\n" : describe_gguf_text(file));
    }
    set_exit(0);
  });
}

}  // namespace tapdiff
