#include "reports/render.hpp"

#include "reports/renderers.hpp"

namespace tapdiff::reports {

std::optional<Format> parse_format(std::string_view name) {
  if (name == "text") return Format::text;
  if (name == "md" || name == "markdown") return Format::markdown;
  if (name == "json") return Format::json;
  if (name == "junit") return Format::junit;
  if (name == "html") return Format::html;
  return std::nullopt;
}

std::string_view format_name(Format format) {
  switch (format) {
    case Format::text: return "text";
    case Format::markdown: return "markdown";
    case Format::json: return "json";
    case Format::junit: return "junit";
    case Format::html: return "html";
  }
  return "text";
}

std::string_view format_extension(Format format) {
  switch (format) {
    case Format::text: return "txt";
    case Format::markdown: return "md";
    case Format::json: return "json";
    case Format::junit: return "xml";
    case Format::html: return "html";
  }
  return "txt";
}

std::string render(const diff::DiffResult& result, Format format, const RenderOptions& options) {
  switch (format) {
    case Format::text: return render_text(result, options);
    case Format::markdown: return render_markdown(result, options);
    case Format::json: return render_json(result, options);
    case Format::junit: return render_junit(result, options);
    case Format::html: return render_html(result, options);
  }
  return render_text(result, options);
}

}  // namespace tapdiff::reports
