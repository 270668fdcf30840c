// One renderer per format; render() dispatches (render.hpp documents the contract).
#pragma once

#include <string>

#include "reports/render.hpp"

namespace tapdiff::reports {

std::string render_text(const diff::DiffResult& result, const RenderOptions& options);
std::string render_markdown(const diff::DiffResult& result, const RenderOptions& options);
std::string render_json(const diff::DiffResult& result, const RenderOptions& options);
std::string render_junit(const diff::DiffResult& result, const RenderOptions& options);
std::string render_html(const diff::DiffResult& result, const RenderOptions& options);

}  // namespace tapdiff::reports
