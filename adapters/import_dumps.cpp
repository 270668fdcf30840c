#include "adapters/import_dumps.hpp"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "adapters/npy.hpp"
#include "adapters/safetensors.hpp"
#include "model/error.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::adapters {
namespace {

struct Pattern {
  std::string text;  // as written in the map
  std::regex regex;  // {layer} -> ([0-9]+), everything else literal
  bool per_layer = false;
  std::string tap;
};

std::string regex_escape(const std::string& text) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(text, special, R"(\$&)");
}

struct Map {
  TraceMetadata metadata;
  std::vector<Pattern> patterns;
};

Map read_map(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "file", "cannot be opened for reading");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(path, "map", fmt::format("expected JSON: {}", e.what()));
  }
  if (!j.is_object()) throw InputError(path, "map", "expected a JSON object");
  Map m;
  m.metadata.producer = Producer::external;
  m.metadata.producer_version = "tapdiff import";
  if (!j.contains("tokens") || !j["tokens"].is_array() || j["tokens"].empty())
    throw InputError(path, "tokens", "expected a non-empty list of token ids (positions 0..)");
  for (const auto& t : j["tokens"]) {
    if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() > INT32_MAX)
      throw InputError(path, "tokens", fmt::format("expected token ids, got {}", t.dump()));
    m.metadata.tokens.push_back(t.get<std::int32_t>());
  }
  m.metadata.prompt_length = std::int64_t(m.metadata.tokens.size());
  if (j.contains("prompt_length")) {
    const auto& p = j["prompt_length"];
    if (!p.is_number_integer() || p.get<std::int64_t>() < 1 || p.get<std::int64_t>() > m.metadata.prompt_length)
      throw InputError(path, "prompt_length", fmt::format("expected 1..{} (the tokens), got {}",
                                                          m.metadata.prompt_length, p.dump()));
    m.metadata.prompt_length = p.get<std::int64_t>();
  }
  if (j.contains("precision")) {
    if (!j["precision"].is_string()) throw InputError(path, "precision", "expected a string such as \"f32\"");
    m.metadata.precision = j["precision"].get<std::string>();
  }
  if (j.contains("model")) {
    const auto& model = j["model"];
    if (!model.is_object()) throw InputError(path, "model", "expected {\"path\": ..., \"sha256\": ...}");
    if (model.contains("path") && model["path"].is_string()) m.metadata.model_path = model["path"].get<std::string>();
    if (model.contains("sha256") && model["sha256"].is_string())
      m.metadata.model_sha256 = model["sha256"].get<std::string>();
  }
  if (!j.contains("taps") || !j["taps"].is_object() || j["taps"].empty())
    throw InputError(path, "taps", "expected an object of dumped-tensor name pattern -> catalogue tap name");
  for (const auto& [pattern, tap] : j["taps"].items()) {
    if (!tap.is_string()) throw InputError(path, "taps." + pattern, fmt::format("expected a tap name, got {}", tap.dump()));
    const TapSpec* spec = find_tap_spec(tap.get<std::string>());
    if (!spec)
      throw InputError(path, "taps." + pattern, fmt::format("\"{}\" is not a catalogue tap (docs/taps.md)",
                                                            tap.get<std::string>()));
    Pattern p;
    p.text = pattern;
    p.tap = std::string(spec->name);
    p.per_layer = pattern.find("{layer}") != std::string::npos;
    if (p.per_layer != (spec->scope == TapScope::layer))
      throw InputError(path, "taps." + pattern,
                       p.per_layer ? fmt::format("{} is a global tap: the pattern cannot hold {{layer}}", p.tap)
                                   : fmt::format("{} is a per-layer tap: the pattern needs {{layer}}", p.tap));
    std::string re = regex_escape(pattern);
    re = std::regex_replace(re, std::regex(R"(\\\{layer\\\})"), "([0-9]+)");
    p.regex = std::regex(re);
    m.patterns.push_back(std::move(p));
  }
  return m;
}

struct Mapped {
  std::string tap;
  int layer = -1;
  DumpedTensor tensor;
};

std::vector<DumpedTensor> read_dumps(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw InputError(dir, "directory", "expected a directory of .npy / .safetensors files");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<DumpedTensor> out;
  for (const auto& f : files) {
    if (f.extension() == ".npy") out.push_back(read_npy(f.string()));
    else if (f.extension() == ".safetensors")
      for (auto& t : read_safetensors(f.string())) out.push_back(std::move(t));
  }
  if (out.empty()) throw InputError(dir, "directory", "holds no .npy or .safetensors file");
  return out;
}

}  // namespace

ImportResult import_dumps(const std::string& dump_dir, const std::string& map_path, const std::string& output) {
  const Map map = read_map(map_path);
  ImportResult result;
  std::vector<Mapped> mapped;
  for (DumpedTensor& t : read_dumps(dump_dir)) {
    const Pattern* match = nullptr;
    std::smatch m;
    for (const Pattern& p : map.patterns)
      if (std::regex_match(t.name, m, p.regex)) {
        match = &p;
        break;
      }
    if (!match) {
      result.unmapped.push_back(t.name);
      continue;
    }
    const int layer = match->per_layer ? std::stoi(m[1].str()) : -1;
    const std::string field = "tensor " + t.name;
    // (1, positions, row...) -> (positions, row...)
    if (t.shape.size() >= 3 && t.shape[0] == 1) t.shape.erase(t.shape.begin());
    if (t.shape.size() < 2)
      throw InputError(t.file, field, fmt::format("shape ({}) : expected (positions, row...) or (1, positions, row...)",
                                                  fmt::join(t.shape, ", ")));
    if (t.shape[0] > std::int64_t(map.metadata.tokens.size()))
      throw InputError(t.file, field, fmt::format("{} positions, but the map lists {} tokens", t.shape[0],
                                                  map.metadata.tokens.size()));
    for (const Mapped& other : mapped)
      if (other.tap == match->tap && other.layer == layer)
        throw InputError(t.file, field, fmt::format("maps to {} layer {} as {} already does", match->tap, layer,
                                                    other.tensor.name));
    mapped.push_back({match->tap, layer, std::move(t)});
  }
  if (mapped.empty())
    throw InputError(map_path, "taps", fmt::format("no tensor of {} matches a pattern (tensors: {})", dump_dir,
                                                   fmt::join(result.unmapped, ", ")));
  std::sort(mapped.begin(), mapped.end(), [](const Mapped& a, const Mapped& b) {
    return execution_order(a.tap, a.layer).value_or(0) < execution_order(b.tap, b.layer).value_or(0);
  });
  TraceWriter writer(output, map.metadata);
  for (const Mapped& m : mapped) {
    const RowShape row(std::vector<std::int64_t>(m.tensor.shape.begin() + 1, m.tensor.shape.end()));
    writer.record(m.tap, m.layer, 0, m.tensor.shape[0], row, m.tensor.values.data());
    result.positions = std::max(result.positions, m.tensor.shape[0]);
  }
  writer.end_step();
  writer.close();
  result.taps = mapped.size();
  return result;
}

}  // namespace tapdiff::adapters
