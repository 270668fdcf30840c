// JSON report; docs/report-json.md is the schema and must change with this file.
#include <cmath>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "reports/json_number.hpp"
#include "reports/renderers.hpp"
#include "reports/summary.hpp"

namespace tapdiff::reports {
namespace {

// Insertion order: the schema identification first, then the answer, then the evidence.
using json = nlohmann::ordered_json;

constexpr int kSchemaVersion = 1;

json number(double value) { return json_number(value); }

json optional_int(const std::optional<std::int64_t>& value) {
  return value ? json(*value) : json(nullptr);
}

std::string_view verdict_key(diff::Verdict v) {
  switch (v) {
    case diff::Verdict::pass: return "pass";
    case diff::Verdict::diverged: return "diverged";
    case diff::Verdict::incompatible: return "incompatible";
  }
  return "";
}

std::string_view pattern_key(diff::PositionPattern p) {
  switch (p) {
    case diff::PositionPattern::none: return "none";
    case diff::PositionPattern::all: return "all";
    case diff::PositionPattern::from: return "from";
    case diff::PositionPattern::some: return "some";
  }
  return "";
}

// inputs_recorded: the tap's (TapComparison::inputs_recorded); input_nmse is null where not.
json row_json(const diff::RowMetrics& r, bool inputs_recorded) {
  return {{"position", r.position},
          {"max_abs", number(r.max_abs)},
          {"max_rel", number(r.max_rel)},
          {"nmse", number(r.nmse)},
          {"cosine", number(r.cosine)},
          {"nonfinite", r.nonfinite},
          {"nonfinite_expected", r.nonfinite_expected},
          {"worst_index", r.worst_index},
          {"worst_expected", number(r.worst_expected)},
          {"worst_actual", number(r.worst_actual)},
          {"input_nmse", inputs_recorded ? number(r.input_nmse) : json(nullptr)},
          {"diverged", r.diverged}};
}

json hparams_json(const HParams& hparams) {
  json out = json::object();
  for (const auto& [key, value] : hparams)
    std::visit(
        [&, k = key](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>)
            out[k] = number(v);
          else
            out[k] = v;
        },
        value);
  return out;
}

json dims_json(const std::optional<TapDims>& dims) {
  if (!dims) return nullptr;
  return {{"n_layer", dims->n_layer},     {"n_embd", dims->n_embd},     {"n_head", dims->n_head},
          {"n_head_kv", dims->n_head_kv}, {"head_dim", dims->head_dim}, {"n_ff", dims->n_ff},
          {"n_vocab", dims->n_vocab},     {"n_ctx", dims->n_ctx}};
}

json layouts_json(const std::map<std::string, TapLayout>& layouts) {
  json out = json::object();
  for (const auto& [name, layout] : layouts) out[name] = layout.to_string();
  return out;
}

json side_json(const diff::TraceSide& side) {
  const auto& m = side.metadata;
  return {{"path", side.path},
          {"complete", side.complete},
          {"producer", std::string(producer_name(m.producer))},
          {"producer_version", m.producer_version},
          {"git_commit", m.git_commit},
          {"model_path", m.model_path},
          {"model_sha256", m.model_sha256},
          {"precision", m.precision},
          {"fault", m.fault},
          {"prompt_length", m.prompt_length},
          {"tokens", m.tokens},
          {"hparams", hparams_json(m.hparams)},
          {"producer_settings", hparams_json(m.settings)},
          {"unavailable", m.unavailable},
          {"layouts", layouts_json(m.layouts)},
          {"dims", dims_json(m.dims)},
          {"lockstep_source", m.lockstep_source.empty() ? json(nullptr) : json(m.lockstep_source)}};
}

// Whether the tap `full_name` of r has recorded inputs (a tap r did not compare: yes).
bool inputs_recorded(const diff::DiffResult& r, const std::string& full_name) {
  const diff::TapComparison* t = find_tap(r, full_name);
  return !t || t->inputs_recorded;
}

json first_json(const diff::DiffResult& r) {
  const std::optional<diff::FirstDivergence>& first = r.first;
  if (!first) return nullptr;
  if (first->shape)
    return {{"tap", first->tap},
            {"name", first->name},
            {"layer", first->layer},
            {"position", nullptr},
            {"pattern", nullptr},
            {"pattern_text", nullptr},
            {"diverged_positions", json::array()},
            {"metrics", nullptr},
            {"expected_shape", first->expected_shape},
            {"actual_shape", first->actual_shape}};
  return {{"tap", first->tap},
          {"name", first->name},
          {"layer", first->layer},
          {"position", first->position},
          {"pattern", pattern_key(first->pattern)},
          {"pattern_text", diff::position_pattern_text(first->pattern, first->position)},
          {"diverged_positions", first->diverged_positions},
          {"metrics", row_json(first->metrics, inputs_recorded(r, first->tap))},
          {"expected_shape", nullptr},
          {"actual_shape", nullptr}};
}

json diagnosis_json(const std::optional<diff::Diagnosis>& d) {
  if (!d) return nullptr;
  auto hypotheses = [](const std::vector<diff::Hypothesis>& list) {
    json out = json::array();
    for (const auto& h : list)
      out.push_back({{"variant", h.variant}, {"class", h.bug_class}, {"residual", number(h.residual)}});
    return out;
  };
  return {{"class", d->bug_class},
          {"evidence", diff::evidence_text(d->evidence)},
          {"variant", d->variant.empty() ? json(nullptr) : json(d->variant)},
          {"residual", d->replayed() ? number(d->residual) : json(nullptr)},
          {"baseline_residual", d->baseline_residual ? number(*d->baseline_residual) : json(nullptr)},
          {"ties", hypotheses(d->ties)},
          {"separating_experiment", d->separating_experiment.empty() ? json(nullptr) : json(d->separating_experiment)},
          {"runners_up", hypotheses(d->runners_up)},
          {"signatures", d->signatures},
          {"explanation", d->explanation},
          {"in_expected", d->in_expected}};
}

json roots_json(const diff::DiffResult& r) {
  json out = json::array();
  for (const auto& root : r.roots) {
    const bool shape = root.kind == "shape";
    out.push_back({{"kind", root.kind},
                   {"tap", root.at.tap},
                   {"name", root.at.name},
                   {"layer", root.at.layer},
                   {"class", root_class(root)},
                   {"evidence", root.diagnosis ? json(diff::evidence_text(root.diagnosis->evidence)) : json(nullptr)},
                   {"position", shape ? json(nullptr) : json(root.at.position)},
                   {"pattern", pattern_key(root.at.pattern)},
                   {"diverged_positions", root.at.diverged_positions},
                   {"metrics", root_measured(root) ? row_json(root.at.metrics, inputs_recorded(r, root.at.tap)) : json(nullptr)},
                   {"expected_shape", shape ? json(root.expected_shape) : json(nullptr)},
                   {"actual_shape", shape ? json(root.actual_shape) : json(nullptr)},
                   {"explained", root.explained},
                   {"diagnosis", diagnosis_json(root.diagnosis)}});
  }
  return out;
}

json top_json(const std::vector<std::pair<int, float>>& top) {
  json out = json::array();
  for (const auto& [token, logit] : top)
    out.push_back({{"token", token}, {"logit", number(logit)}});
  return out;
}

json logits_json(const std::optional<diff::LogitsSummary>& l) {
  if (!l) return nullptr;
  json percentiles = json::array();
  for (const auto& [p, v] : l->kl_percentiles)
    percentiles.push_back({{"percentile", p}, {"kl", number(v)}});
  json positions = json::array();
  for (const auto& p : l->positions)
    positions.push_back({{"position", p.position},
                         {"kl", number(p.kl)},
                         {"same_top1", p.same_top1},
                         {"top5_overlap", p.top5_overlap},
                         {"top_expected", top_json(p.top_expected)},
                         {"top_actual", top_json(p.top_actual)}});
  return {{"n_positions", l->n_positions},
          {"kl_mean", number(l->kl_mean)},
          {"kl_stderr", number(l->kl_stderr)},
          {"kl_max", number(l->kl_max)},
          {"kl_percentiles", percentiles},
          {"same_top1_rate", number(l->same_top1_rate)},
          {"mean_top5_overlap", number(l->mean_top5_overlap)},
          {"first_greedy_difference", optional_int(l->first_greedy_difference)},
          {"positions", positions}};
}

json tap_json(const diff::TapComparison& t, bool with_rows) {
  const diff::RowMetrics* first = t.first_diverged();
  const diff::RowMetrics* worst = t.worst();
  json rows = json::array();
  if (with_rows)
    for (const auto& r : t.rows) rows.push_back(row_json(r, t.inputs_recorded));
  return {{"tap", t.full_name},
          {"name", t.name},
          {"layer", t.layer},
          {"class", t.tap_class},
          {"row_shape", t.row_shape},
          {"threshold_nmse", number(t.threshold_nmse)},
          {"jump_factor", number(t.jump_factor)},
          {"min_passing_nmse", number(t.min_passing_nmse)},
          {"diverged", first != nullptr},
          {"first_diverged_position", first ? json(first->position) : json(nullptr)},
          {"worst_nmse", worst ? number(worst->nmse) : json(nullptr)},
          {"worst_position", worst ? json(worst->position) : json(nullptr)},
          {"rows", rows}};
}

json summary_json(const diff::DiffResult& r) {
  const TapCounts counts = count_taps(r);
  json classes = json::array();
  for (const auto& c : class_summaries(r))
    classes.push_back({{"class", c.tap_class},
                       {"taps", c.taps},
                       {"diverged", c.diverged},
                       {"first_diverged_tap",
                        c.first_diverged ? json(c.first_diverged->full_name) : json(nullptr)}});
  return {{"headline", headline(r)},
          {"taps", counts.taps},
          {"positions", counts.positions},
          {"taps_diverged", counts.diverged},
          {"taps_nonfinite", counts.nonfinite},
          {"classes", classes}};
}

}  // namespace

std::string render_json(const diff::DiffResult& r, const RenderOptions& options) {
  json findings = json::array();
  for (const auto& f : r.findings) {
    json item = {{"kind", f.kind}, {"tap", f.tap}, {"detail", f.detail}};
    if (f.kind == "shape") {
      item["expected_shape"] = f.expected_shape;
      item["actual_shape"] = f.actual_shape;
    }
    findings.push_back(std::move(item));
  }
  json out = {{"schema", "tapdiff-report"},
              {"schema_version", kSchemaVersion},
              {"verdict", verdict_key(r.verdict)},
              {"profile", r.profile},
              {"compared_positions", r.compared_positions},
              {"expected", side_json(r.expected)},
              {"actual", side_json(r.actual)},
              {"summary", summary_json(r)},
              {"mode", diff::diff_mode_text(r.mode)},
              {"findings", findings},
              {"first_divergence", first_json(r)},
              {"diagnosis", diagnosis_json(r.diagnosis)},
              {"roots", roots_json(r)},
              {"logits", logits_json(r.logits)},
              {"taps", json::array()}};
  // Names and paths come from any engine: replace invalid UTF-8 rather than throw.
  std::string text = out.dump(2, ' ', false, json::error_handler_t::replace);
  if (r.taps.empty()) return text + "\n";
  // The taps, a long prompt's rows among them, are dumped one at a time into the last member's
  // place, as dump() would lay them out: the whole tree of a 2048-token run's rows took 2.8 GB.
  const std::string empty = "[]\n}";
  text.resize(text.size() - empty.size());
  text += "[\n";
  for (std::size_t i = 0; i < r.taps.size(); ++i) {
    const std::string tap = tap_json(r.taps[i], options.json_rows).dump(2, ' ', false, json::error_handler_t::replace);
    // Room for as many taps as the first, and a quarter more: pages never written cost nothing,
    // where growing by doubling would hold the old text and twice its size at once.
    if (i == 0) text.reserve(text.size() + tap.size() * 5 / 4 * r.taps.size());
    text += "    ";
    std::size_t from = 0;
    for (std::size_t nl; (nl = tap.find('\n', from)) != std::string::npos; from = nl + 1) {
      text.append(tap, from, nl + 1 - from);
      text += "    ";
    }
    text.append(tap, from);
    text += i + 1 < r.taps.size() ? ",\n" : "\n";
  }
  text += "  ]\n}\n";
  return text;
}

}  // namespace tapdiff::reports
