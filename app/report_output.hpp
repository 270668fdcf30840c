// The report options shared by diff and check: a format on stdout, plus report files.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "diff/corpus.hpp"
#include "diff/result.hpp"
#include "diff/tolerance.hpp"

namespace tapdiff {

struct ReportOutput {
  std::string format = "text";        // on stdout
  std::vector<std::string> files;     // written by extension: .html .md .json .xml .txt
  bool all_taps = false;              // every tap in the tables, not only the diverged and the closest
};

void add_report_options(CLI::App& cmd, ReportOutput& out);
void write_reports(const diff::DiffResult& result, const ReportOutput& out);
void write_corpus_reports(const diff::CorpusReport& report, const ReportOutput& out);  // text, md, json
diff::ToleranceProfile load_profile_option(const std::string& value);  // name or .json file
int exit_code_for(const diff::DiffResult& result);  // 0 pass, 1 diverged, 2 incompatible

}  // namespace tapdiff
