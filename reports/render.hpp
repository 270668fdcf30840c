// Renderers of a diff result: terminal text, Markdown, JSON, JUnit XML and self-contained HTML
// (docs/reports.md says what each shows; docs/report-json.md is the JSON schema).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "diff/result.hpp"

namespace tapdiff::reports {

enum class Format { text, markdown, json, junit, html };

// "text", "md" or "markdown", "json", "junit", "html"; nullopt for anything else.
std::optional<Format> parse_format(std::string_view name);
std::string_view format_name(Format format);       // "text", "markdown", ...
std::string_view format_extension(Format format);  // "txt", "md", "json", "xml", "html"

struct RenderOptions {
  bool color = false;            // ANSI colours in text (the CLI sets it on a terminal)
  int max_table_rows = 16;       // rows of the compact per-tap tables (text, Markdown, HTML)
  int worst_passing_taps = 3;    // passing taps closest to their threshold, shown with the diverged
  int max_logit_positions = 64;  // logits rows in the HTML and Markdown tables
  bool json_rows = true;         // JSON: every tap's per-position rows (~0.5 KB each)
};

// Never throws on odd content: names and paths are escaped for the format, invalid UTF-8 is
// replaced, non-finite numbers are spelled out.
std::string render(const diff::DiffResult& result, Format format,
                   const RenderOptions& options = {});

}  // namespace tapdiff::reports
