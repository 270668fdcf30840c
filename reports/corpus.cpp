#include "reports/corpus.hpp"

#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "reports/escape.hpp"
#include "reports/json_number.hpp"

namespace tapdiff::reports {
namespace {

using json = nlohmann::ordered_json;

// llama-perplexity's %10.6f, in scientific notation where that would print a small value as 0.
std::string kld_value(double v) { return v != 0 && std::fabs(v) < 1e-4 ? fmt::format("{:10.3e}", v) : fmt::format("{:10.6f}", v); }

std::string percent_label(double q) { return q == 50 ? "Median" : fmt::format("{:.1f}%", q); }

std::string text(const diff::CorpusReport& r) {
  const diff::CorpusStats::Summary& s = r.summary;
  std::string out = fmt::format("{}  corpus {}\n", r.failures.empty() ? "PASS" : "DIVERGED", terminal_safe(r.corpus));
  out += fmt::format("  expected     {}\n  actual       {}\n", terminal_safe(r.expected), terminal_safe(r.actual));
  out += fmt::format("  scored       {} tokens: {} windows of {} tokens ({} in the file), the second half of each\n\n",
                     s.count, r.n_windows, r.window, r.n_tokens);
  out += "====== Perplexity statistics ======\n";
  out += fmt::format("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", s.ppl, s.ppl_unc);
  out += fmt::format("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", s.ppl_base, s.ppl_base_unc);
  out += fmt::format("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n", 100 * s.log_ppl_cor);
  out += fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.log_ppl_ratio, s.log_ppl_ratio_unc);
  out += fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ppl_ratio, s.ppl_ratio_unc);
  out += fmt::format("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n\n", s.ppl_diff, s.ppl_diff_unc);
  out += "====== KL divergence statistics ======\n";
  out += fmt::format("Mean    KLD: {} ± {}\n", kld_value(s.kld_mean), kld_value(s.kld_unc));
  out += fmt::format("Maximum KLD: {}\n", kld_value(s.kld_max));
  for (const auto& [q, v] : s.kld_percentiles) {
    if (q == 10) out += fmt::format("Median  KLD: {}\n", kld_value(s.kld_median));
    out += fmt::format("{:<7} KLD: {}\n", percent_label(q), kld_value(v));
  }
  out += fmt::format("Minimum KLD: {}\n\n", kld_value(s.kld_min));
  out += "====== Token probability statistics ======\n";
  out += fmt::format("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100 * s.p_diff_mean, 100 * s.p_diff_unc);
  out += fmt::format("Maximum Δp: {:6.3f}%\n", 100 * s.p_diff_max);
  for (const auto& [q, v] : s.p_diff_percentiles) {
    if (q == 25) out += fmt::format("Median  Δp: {:6.3f}%\n", 100 * s.p_diff_median);
    out += fmt::format("{:<7} Δp: {:6.3f}%\n", percent_label(q), 100 * v);
  }
  out += fmt::format("Minimum Δp: {:6.3f}%\n", 100 * s.p_diff_min);
  out += fmt::format("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100 * s.p_diff_rms, 100 * s.p_diff_rms_unc);
  out += fmt::format("Same top p: {:6.3f} ± {:5.3f} %\n\n", 100 * s.same_top, 100 * s.same_top_unc);
  if (s.worst_window >= 0) out += fmt::format("largest KLD  window {} position {}\n", s.worst_window, s.worst_position);
  if (!r.worst_window_finding.empty())
    out += fmt::format("  first divergence in that window, every tap recorded: {}\n", terminal_safe(r.worst_window_finding));
  if (r.worst_window_traces.size() == 2)
    out += fmt::format("  traces: {} {} (`tapdiff repro` them for a standalone test)\n",
                       terminal_safe(r.worst_window_traces[0]), terminal_safe(r.worst_window_traces[1]));
  std::string limits;
  auto limit = [&](const char* what, const std::optional<double>& v, double scale, const char* unit) {
    if (v) limits += fmt::format("{}{} {:.6g}{}", limits.empty() ? "" : ", ", what, scale * *v, unit);
  };
  limit("mean KLD <=", r.gate.max_kld_mean, 1, "");
  limit("99% KLD <=", r.gate.max_kld_99, 1, "");
  limit("same top >=", r.gate.min_same_top, 100, "%");
  limit("PPL ratio <=", r.gate.max_ppl_ratio, 1, "");
  out += fmt::format("gate         {}\n", limits.empty() ? "none" : limits);
  for (const std::string& f : r.failures) out += fmt::format("FAILED       {}\n", f);
  return out;
}

std::string markdown(const diff::CorpusReport& r) {
  const diff::CorpusStats::Summary& s = r.summary;
  std::string out = fmt::format("## Corpus check: {}\n\n", r.failures.empty() ? "PASS" : "DIVERGED");
  out += fmt::format("`{}` — expected {}, actual {}; {} tokens scored in {} windows of {}.\n\n",
                     md_escape(r.corpus), md_escape(r.expected), md_escape(r.actual), s.count,
                     r.n_windows, r.window);
  out += "| statistic | value |\n|---|---|\n";
  out += fmt::format("| PPL(actual) | {:.6f} ± {:.6f} |\n| PPL(expected) | {:.6f} ± {:.6f} |\n", s.ppl, s.ppl_unc,
                     s.ppl_base, s.ppl_base_unc);
  out += fmt::format("| PPL ratio | {:.6f} ± {:.6f} |\n", s.ppl_ratio, s.ppl_ratio_unc);
  out += fmt::format("| mean KLD | {:.6g} ± {:.6g} |\n| max KLD | {:.6g} |\n", s.kld_mean, s.kld_unc, s.kld_max);
  for (const auto& [q, v] : s.kld_percentiles) out += fmt::format("| {} KLD | {:.6g} |\n", percent_label(q), v);
  out += fmt::format("| RMS Δp | {:.3f} ± {:.3f} % |\n| same top p | {:.3f} ± {:.3f} % |\n\n", 100 * s.p_diff_rms,
                     100 * s.p_diff_rms_unc, 100 * s.same_top, 100 * s.same_top_unc);
  for (const std::string& f : r.failures) out += fmt::format("- FAILED: {}\n", md_escape(f));
  if (!r.worst_window_finding.empty())
    out += fmt::format("\nWindow {} (the largest KLD), every tap recorded, first diverges at {}.\n", s.worst_window,
                       md_escape(r.worst_window_finding));
  return out;
}

json pairs(const std::vector<std::pair<double, double>>& values) {
  json out = json::object();
  for (const auto& [q, v] : values) out[fmt::format("{:g}", q)] = json_number(v);
  return out;
}

std::string to_json(const diff::CorpusReport& r) {
  const diff::CorpusStats::Summary& s = r.summary;
  json j;
  j["schema"] = "tapdiff-corpus";
  j["schema_version"] = 1;
  j["verdict"] = r.failures.empty() ? "pass" : "diverged";
  j["corpus"] = clean_utf8(r.corpus);
  j["expected"] = clean_utf8(r.expected);
  j["actual"] = clean_utf8(r.actual);
  j["n_tokens"] = r.n_tokens;
  j["window"] = r.window;
  j["n_windows"] = r.n_windows;
  j["scored"] = s.count;
  j["ppl"] = {{"actual", json_number(s.ppl)}, {"actual_unc", json_number(s.ppl_unc)}, {"expected", json_number(s.ppl_base)},
              {"expected_unc", json_number(s.ppl_base_unc)}, {"log_cor", json_number(s.log_ppl_cor)}, {"log_ratio", json_number(s.log_ppl_ratio)},
              {"log_ratio_unc", json_number(s.log_ppl_ratio_unc)}, {"ratio", json_number(s.ppl_ratio)}, {"ratio_unc", json_number(s.ppl_ratio_unc)},
              {"diff", json_number(s.ppl_diff)}, {"diff_unc", json_number(s.ppl_diff_unc)}};
  j["kld"] = {{"mean", json_number(s.kld_mean)}, {"mean_unc", json_number(s.kld_unc)}, {"max", json_number(s.kld_max)}, {"median", json_number(s.kld_median)},
              {"min", json_number(s.kld_min)}, {"percentiles", pairs(s.kld_percentiles)}};
  j["p_diff"] = {{"mean", json_number(s.p_diff_mean)}, {"mean_unc", json_number(s.p_diff_unc)}, {"max", json_number(s.p_diff_max)},
                 {"median", json_number(s.p_diff_median)}, {"min", json_number(s.p_diff_min)}, {"percentiles", pairs(s.p_diff_percentiles)},
                 {"rms", json_number(s.p_diff_rms)}, {"rms_unc", json_number(s.p_diff_rms_unc)}};
  j["same_top"] = {{"rate", json_number(s.same_top)}, {"unc", json_number(s.same_top_unc)}};
  j["worst"] = {{"window", s.worst_window},
                {"position", s.worst_position},
                {"finding", r.worst_window_finding.empty() ? json(nullptr) : json(clean_utf8(r.worst_window_finding))},
                {"traces", r.worst_window_traces}};
  auto limit = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  j["gate"] = {{"max_kld_mean", limit(r.gate.max_kld_mean)}, {"max_kld_99", limit(r.gate.max_kld_99)},
               {"min_same_top", limit(r.gate.min_same_top)}, {"max_ppl_ratio", limit(r.gate.max_ppl_ratio)}};
  j["failures"] = r.failures;
  return j.dump(2) + "\n";
}

}  // namespace

std::string render_corpus(const diff::CorpusReport& report, Format format) {
  switch (format) {
    case Format::text: return text(report);
    case Format::markdown: return markdown(report);
    case Format::json: return to_json(report);
    case Format::junit:
    case Format::html: break;
  }
  throw std::invalid_argument(fmt::format("--format {}: a corpus check reports as text, md or json",
                                          format_name(format)));
}

}  // namespace tapdiff::reports
