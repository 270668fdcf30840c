#include "tapdiff/trace_summary.hpp"

#include <algorithm>
#include <stdexcept>

namespace tapdiff {
namespace {

nlohmann::json hparams_json(const HParams& hparams) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& entry : hparams) {  // no structured binding: clang cannot capture one
    std::visit([&](const auto& v) { out[entry.first] = v; }, entry.second);
  }
  return out;
}

nlohmann::json dims_json(const TapDims& d) {
  nlohmann::json out = {{"n_layer", d.n_layer},     {"n_embd", d.n_embd},     {"n_head", d.n_head},
                        {"n_head_kv", d.n_head_kv}, {"head_dim", d.head_dim}, {"n_ff", d.n_ff},
                        {"n_vocab", d.n_vocab},     {"n_ctx", d.n_ctx}};
  if (d.n_expert > 0) {  // a mixture of experts only (docs/trace-schema.md)
    out["n_expert"] = d.n_expert;
    out["n_expert_used"] = d.n_expert_used;
  }
  return out;
}

nlohmann::json catalogue_json(const TraceReader& trace) {
  const auto& dims = trace.metadata().dims;
  if (!dims) return nullptr;
  TapFilter filter;
  try {
    filter = TapFilter::parse(trace.filter());
  } catch (const std::invalid_argument& e) {
    return {{"error", std::string("cannot parse the trace's tap filter: ") + e.what()}};
  }
  CatalogueReport report = check_catalogue(trace.emitted_taps(), *dims, filter);
  // Taps the producer declared it cannot record (/unavailable) are listed as such, not missing.
  const auto& declared = trace.metadata().unavailable;
  const auto split = std::stable_partition(report.missing.begin(), report.missing.end(), [&](const std::string& full) {
    return declared.count(split_full_tap_name(full).first) == 0;
  });
  const std::vector<std::string> unavailable(split, report.missing.end());
  report.missing.erase(split, report.missing.end());
  return {{"ok", report.ok()},
          {"missing", report.missing},
          {"unavailable", unavailable},
          {"extra", report.extra},
          {"wrong_shape", report.wrong_shape}};
}

}  // namespace

std::string position_ranges(const std::vector<std::int64_t>& positions) {
  std::string text;
  for (std::size_t i = 0; i < positions.size();) {
    std::size_t j = i;
    while (j + 1 < positions.size() && positions[j + 1] == positions[j] + 1) ++j;
    if (!text.empty()) text += ",";
    text += std::to_string(positions[i]);
    if (j > i) text += "-" + std::to_string(positions[j]);
    i = j + 1;
  }
  return text;
}

nlohmann::json trace_summary(const TraceReader& trace) {
  const TraceMetadata& m = trace.metadata();
  nlohmann::json taps = nlohmann::json::array();
  std::int64_t rows = 0;
  std::int64_t bytes = 0;
  for (const TapInfo& t : trace.taps()) {
    nlohmann::json tap = {{"name", t.name},
                          {"layer", t.layer},
                          {"full_name", t.full_name},
                          {"stack", "/taps/" + t.stack},
                          {"slot", t.slot},
                          {"row_shape", t.row_shape},
                          {"rows", t.n_rows},
                          {"positions", position_ranges(t.positions())}};
    if (t.batch_rows > 0) tap["batch_rows"] = t.batch_rows;  // the first rows, in the stack's batch
    if (!t.layout_note.empty()) {
      tap["stored_shape"] = t.stored_shape;
      tap["layout"] = t.layout_note;
    }
    taps.push_back(std::move(tap));
    rows += t.n_rows;
    bytes += t.n_rows * t.stored_size * static_cast<std::int64_t>(sizeof(float));
  }
  nlohmann::json layouts = nlohmann::json::object();
  for (const auto& [name, layout] : m.layouts) layouts[name] = layout.to_string();
  return {
      {"file", trace.path()},
      {"format", std::string(kTraceFormatName)},
      {"format_version", trace.format_version().to_string()},
      {"complete", trace.complete()},
      {"committed_steps", trace.committed_steps()},
      {"producer",
       {{"kind", std::string(producer_name(m.producer))},
        {"version", m.producer_version},
        {"git_commit", m.git_commit},
        {"settings", hparams_json(m.settings)},
        {"unavailable", m.unavailable},
        {"layouts", layouts}}},
      {"model",
       {{"path", m.model_path}, {"sha256", m.model_sha256}, {"hparams", hparams_json(m.hparams)}}},
      {"precision", m.precision},
      {"fault", m.fault},
      {"lockstep_source", m.lockstep_source.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.lockstep_source)},
      {"prompt_length", m.prompt_length},
      {"tokens", m.tokens},
      {"dims", m.dims ? dims_json(*m.dims) : nlohmann::json(nullptr)},
      {"filter",
       {{"names", trace.filter().names},
        {"layers", trace.filter().layers},
        {"positions", trace.filter().positions}}},
      {"n_taps", trace.taps().size()},
      {"n_rows", rows},
      {"tap_bytes", bytes},
      {"taps", taps},
      {"catalogue", catalogue_json(trace)}};
}

}  // namespace tapdiff
