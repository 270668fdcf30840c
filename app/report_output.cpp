#include "app/report_output.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <limits>
#include <system_error>
#include <unistd.h>

#include "app/exit_codes.hpp"
#include "model/error.hpp"
#include "reports/corpus.hpp"
#include "reports/render.hpp"

namespace tapdiff {
namespace {

reports::Format format_for_file(const std::string& path) {
  const auto dot = path.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  if (ext == "html" || ext == "htm") return reports::Format::html;
  if (ext == "md") return reports::Format::markdown;
  if (ext == "json") return reports::Format::json;
  if (ext == "xml") return reports::Format::junit;
  if (ext == "txt") return reports::Format::text;
  throw std::invalid_argument(fmt::format(
      "--report {}: expected a file ending in .html, .md, .json, .xml (JUnit) or .txt", path));
}

}  // namespace

void add_report_options(CLI::App& cmd, ReportOutput& out) {
  cmd.add_option("--format", out.format, "Report on stdout: text, md, json, junit, html")
      ->check(CLI::IsMember({"text", "md", "markdown", "json", "junit", "html"}))
      ->capture_default_str();
  cmd.add_option("-o,--report", out.files,
                 "Also write a report file; the extension picks the format (.html .md .json .xml .txt); repeatable");
  cmd.add_flag("--all-taps", out.all_taps,
               "List every tap with the smallest NMSE threshold it would have passed (for tuning profiles)");
}

namespace {

// `render` in out.format on stdout, and into each report file in the format of its extension
// (written beside it, then renamed: a failed write leaves no half file).
void write_rendered(const ReportOutput& out, const std::function<std::string(reports::Format, bool screen)>& render) {
  // Check every path's extension (and that the format renders) before writing anything.
  std::vector<reports::Format> formats;
  for (const auto& f : out.files) formats.push_back(format_for_file(f));
  const std::string shown = render(*reports::parse_format(out.format), true);
  std::vector<std::string> files;
  for (const reports::Format f : formats) files.push_back(render(f, false));
  // fwrite, not fmt::print, which would copy a long report once more; a short write fails as
  // fmt::print's does.
  if (std::fwrite(shown.data(), 1, shown.size(), stdout) != shown.size())
    throw std::system_error(errno, std::generic_category(), "cannot write the report to standard output");
  for (std::size_t i = 0; i < out.files.size(); ++i) {
    const std::string tmp = out.files[i] + ".tmp";
    std::ofstream f(tmp, std::ios::binary);
    const bool created = f.is_open();  // else the path is not ours to remove
    const auto fail = [&] {
      const int error = errno;
      if (created) std::remove(tmp.c_str());
      throw InputError(out.files[i], "report", fmt::format("cannot write: {}", std::strerror(error)));
    };
    if (!created) fail();
    f << files[i];
    f.close();
    if (!f) fail();
    if (std::rename(tmp.c_str(), out.files[i].c_str()) != 0) fail();
    std::fflush(stdout);
    fmt::print(stderr, "report: {}\n", out.files[i]);
  }
}

}  // namespace

void write_reports(const diff::DiffResult& result, const ReportOutput& out) {
  reports::RenderOptions options;
  if (out.all_taps) options.max_table_rows = options.worst_passing_taps = std::numeric_limits<int>::max();
  write_rendered(out, [&](reports::Format format, bool screen) {
    reports::RenderOptions o = options;
    o.color = screen && out.format == "text" && isatty(STDOUT_FILENO) == 1;
    return reports::render(result, format, o);
  });
}

void write_corpus_reports(const diff::CorpusReport& report, const ReportOutput& out) {
  write_rendered(out, [&](reports::Format format, bool) { return reports::render_corpus(report, format); });
}

diff::ToleranceProfile load_profile_option(const std::string& value) {
  if (value.size() > 5 && value.substr(value.size() - 5) == ".json") return diff::load_profile(value);
  return diff::builtin_profile(value);
}

int exit_code_for(const diff::DiffResult& result) {
  switch (result.verdict) {
    case diff::Verdict::pass: return kExitPass;
    case diff::Verdict::diverged: return kExitDiverged;
    case diff::Verdict::incompatible: return kExitInputError;
  }
  return kExitInputError;
}

}  // namespace tapdiff
