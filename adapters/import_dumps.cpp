#include "adapters/import_dumps.hpp"

#include <algorithm>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "adapters/npy.hpp"
#include "adapters/safetensors.hpp"
#include "model/error.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::adapters {
namespace {

struct Pattern {
  std::string text;  // as written in the map
  std::regex regex;  // {layer} -> ([0-9]+), everything else literal
  bool per_layer = false;
  std::string tap;
  std::vector<std::string> axes;  // declared axis names; empty: (1,) positions, row...
  std::int64_t first_position = 0;  // of the tensor's first row: a dump of the last position alone
};

// A key the map does not know is a typo ("prompt_lenght") that would otherwise change the
// trace silently.
void only_keys(const nlohmann::json& object, std::initializer_list<const char*> known, const std::string& path,
               const std::string& where) {
  for (const auto& [key, value] : object.items())
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; }))
      throw InputError(path, where.empty() ? key : where + "." + key,
                       fmt::format("unknown key; expected {}", fmt::join(known, ", ")));
}

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
  only_keys(j, {"tokens", "prompt_length", "precision", "model", "taps"}, path, "");
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
    only_keys(model, {"path", "sha256"}, path, "model");
    if (model.contains("path") && model["path"].is_string()) m.metadata.model_path = model["path"].get<std::string>();
    if (model.contains("sha256") && model["sha256"].is_string())
      m.metadata.model_sha256 = model["sha256"].get<std::string>();
  }
  if (!j.contains("taps") || !j["taps"].is_object() || j["taps"].empty())
    throw InputError(path, "taps", "expected an object of dumped-tensor name pattern -> catalogue tap name");
  for (const auto& [pattern, entry] : j["taps"].items()) {
    const std::string field = "taps." + pattern;
    const nlohmann::json& tap = entry.is_object() && entry.contains("tap") ? entry["tap"] : entry;
    if (!tap.is_string())
      throw InputError(path, field, fmt::format("expected a tap name or {{\"tap\": ..., \"axes\": [...]}}, got {}",
                                                entry.dump()));
    const TapSpec* spec = find_tap_spec(tap.get<std::string>());
    if (!spec)
      throw InputError(path, field, fmt::format("\"{}\" is not a catalogue tap (docs/taps.md)",
                                                tap.get<std::string>()));
    Pattern p;
    if (entry.is_object()) only_keys(entry, {"tap", "axes", "first_position"}, path, field);
    if (entry.is_object() && entry.contains("first_position")) {
      const auto& first = entry["first_position"];
      if (!first.is_number_integer() || first.get<std::int64_t>() < 0 ||
          first.get<std::int64_t>() >= std::int64_t(m.metadata.tokens.size()))
        throw InputError(path, field + ".first_position",
                         fmt::format("expected the position of the tensor's first row, 0..{}, got {}",
                                     m.metadata.tokens.size() - 1, first.dump()));
      p.first_position = first.get<std::int64_t>();
    }
    if (entry.is_object() && entry.contains("axes")) {
      const auto& axes = entry["axes"];
      if (!axes.is_array()) throw InputError(path, field + ".axes", "expected a list of axis names");
      for (const auto& a : axes) {
        if (!a.is_string()) throw InputError(path, field + ".axes", fmt::format("expected axis names, got {}", a.dump()));
        p.axes.push_back(a.get<std::string>());
      }
      if (std::count(p.axes.begin(), p.axes.end(), "position") != 1)
        throw InputError(path, field + ".axes", "expected exactly one \"position\" axis");
    }
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
  std::int64_t first_position = 0;
  DumpedTensor tensor;
};

// The tensor as (positions, row...) under its declared axes: batch axes dropped, the position
// axis first, the row's axes in their order, flattened to one axis for a one-axis catalogue row.
// Returns what it did ("" when nothing).
std::string align(DumpedTensor& t, const std::vector<std::string>& axes, int catalogue_rank, const std::string& field) {
  std::string did;
  if (!axes.empty()) {
    if (axes.size() != t.shape.size())
      throw InputError(t.file, field, fmt::format("{} axes declared ({}), the tensor has {} ({})", axes.size(),
                                                  fmt::join(axes, ", "), t.shape.size(), fmt::join(t.shape, ", ")));
    std::vector<std::size_t> order;  // source axis of each output axis
    order.push_back(std::size_t(std::find(axes.begin(), axes.end(), "position") - axes.begin()));
    for (std::size_t a = 0; a < axes.size(); ++a) {
      if (axes[a] == "batch" && t.shape[a] != 1)
        throw InputError(t.file, field, fmt::format("axis {} (batch) has size {}, expected 1", a, t.shape[a]));
      if (axes[a] != "batch" && axes[a] != "position") order.push_back(a);
    }
    std::vector<std::int64_t> shape, stride(t.shape.size(), 1);
    for (std::size_t a = t.shape.size(); a-- > 1;) stride[a - 1] = stride[a] * t.shape[a];
    for (std::size_t a : order) shape.push_back(t.shape[a]);
    std::vector<float> values(t.values.size());
    std::vector<std::int64_t> index(order.size(), 0);
    for (std::size_t out = 0; out < values.size(); ++out) {
      std::int64_t from = 0;
      for (std::size_t k = 0; k < order.size(); ++k) from += index[k] * stride[order[k]];
      values[out] = t.values[std::size_t(from)];
      for (std::size_t k = order.size(); k-- > 0;)
        if (++index[k] < shape[k]) break;
        else index[k] = 0;
    }
    std::vector<std::string> names;
    for (std::size_t a : order) names.push_back(axes[a]);
    did = fmt::format("axes ({}) -> ({})", fmt::join(axes, ", "), fmt::join(names, ", "));
    t.shape = std::move(shape);
    t.values = std::move(values);
  } else if (t.shape.size() >= 3 && t.shape[0] == 1) {
    t.shape.erase(t.shape.begin());  // (1, positions, row...)
  }
  if (t.shape.size() < 2)
    throw InputError(t.file, field, fmt::format("shape ({}): expected (positions, row...) or (1, positions, row...)",
                                                fmt::join(t.shape, ", ")));
  if (catalogue_rank == 1 && t.shape.size() > 2) {
    std::int64_t width = 1;
    for (std::size_t a = 1; a < t.shape.size(); ++a) width *= t.shape[a];
    did += fmt::format("{}row [{}] flattened to [{}]", did.empty() ? "" : ", ",
                       fmt::join(t.shape.begin() + 1, t.shape.end(), ", "), width);
    t.shape = {t.shape[0], width};
  }
  return did;
}

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
    if (const std::string did = align(t, match->axes, find_tap_spec(match->tap)->row_rank, field); !did.empty())
      result.aligned.push_back(fmt::format("{}: {}", full_tap_name(match->tap, layer), did));
    if (match->first_position + t.shape[0] > std::int64_t(map.metadata.tokens.size()))
      throw InputError(t.file, field, fmt::format("{} positions from position {}, but the map lists {} tokens",
                                                  t.shape[0], match->first_position, map.metadata.tokens.size()));
    for (const Mapped& other : mapped)
      if (other.tap == match->tap && other.layer == layer)
        throw InputError(t.file, field, fmt::format("maps to {} layer {} as {} already does", match->tap, layer,
                                                    other.tensor.name));
    mapped.push_back({match->tap, layer, match->first_position, std::move(t)});
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
    writer.record(m.tap, m.layer, m.first_position, m.tensor.shape[0], row, m.tensor.values.data());
    result.positions = std::max(result.positions, m.first_position + m.tensor.shape[0]);
  }
  writer.end_step();
  writer.close();
  result.taps = mapped.size();
  return result;
}

}  // namespace tapdiff::adapters
