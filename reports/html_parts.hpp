// The sections of the HTML report, each a self-contained fragment of escaped markup.
#pragma once

#include <string>
#include <string_view>

#include "reports/escape.hpp"
#include "reports/render.hpp"

namespace tapdiff::reports {

extern const std::string_view kHtmlStyle;  // the page's only stylesheet, inlined

inline std::string h(std::string_view text) { return xml_escape(text); }

// A small square in the heatmap colour of `nmse`, tying table numbers to the heatmaps.
std::string html_swatch(double nmse, bool nonfinite);

std::string html_banner(const diff::DiffResult& result);
std::string html_first_divergence(const diff::DiffResult& result);
std::string html_diagnosis(const diff::DiffResult& result);
std::string html_findings(const diff::DiffResult& result);
std::string html_roots(const diff::DiffResult& result);  // the independent roots table
std::string html_heatmaps(const diff::DiffResult& result);
std::string html_taps(const diff::DiffResult& result, const RenderOptions& options);
std::string html_logits(const diff::DiffResult& result, const RenderOptions& options);
std::string html_metadata(const diff::DiffResult& result);

}  // namespace tapdiff::reports
