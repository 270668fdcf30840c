// Renderers of a corpus check (diff/corpus.hpp): text laid out as llama-perplexity prints its
// statistics, Markdown, and JSON (docs/report-json.md, "Corpus report").
#pragma once

#include <string>

#include "diff/corpus.hpp"
#include "reports/render.hpp"

namespace tapdiff::reports {

// text, markdown or json; throws std::invalid_argument for junit and html.
std::string render_corpus(const diff::CorpusReport& report, Format format);

}  // namespace tapdiff::reports
