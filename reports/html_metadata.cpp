// The HTML report's run metadata: both traces side by side, differing fields marked.
#include <fmt/format.h>

#include <algorithm>
#include <type_traits>

#include "reports/html_parts.hpp"

namespace tapdiff::reports {
namespace {

constexpr std::size_t kMaxTokens = 96;

std::string or_dash(const std::string& text) { return text.empty() ? "\u2014" : h(text); }

std::string dims_text(const std::optional<TapDims>& d) {
  if (!d) return "";
  return fmt::format(
      "n_layer {} \u00b7 n_embd {} \u00b7 n_head {} \u00b7 n_head_kv {} \u00b7 "
      "head_dim {} \u00b7 n_ff {} \u00b7 n_vocab {} \u00b7 n_ctx {}",
      d->n_layer, d->n_embd, d->n_head, d->n_head_kv, d->head_dim, d->n_ff, d->n_vocab, d->n_ctx);
}

std::string hparams_text(const HParams& hparams) {
  std::string out;
  for (const auto& [key, value] : hparams) {
    out += (out.empty() ? "" : " \u00b7 ") + key + " ";
    std::visit(
        [&](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>)
            out += v;
          else if constexpr (std::is_same_v<std::decay_t<decltype(v)>, double>)
            out += fmt::format("{:g}", v);
          else
            out += std::to_string(v);
        },
        value);
  }
  return out;
}

std::size_t first_difference(const std::vector<std::int32_t>& a,
                             const std::vector<std::int32_t>& b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<std::size_t>(ia - a.begin());
}

std::string tokens_html(const TraceMetadata& m, std::size_t differ_at) {
  std::string out =
      fmt::format("<span class=\"quiet\">{} tokens, prompt {}</span><br><span class=\"tokens\">",
                  m.tokens.size(), m.prompt_length);
  for (std::size_t i = 0; i < std::min(m.tokens.size(), kMaxTokens); ++i) {
    std::string cls = static_cast<std::int64_t>(i) < m.prompt_length ? "p" : "g";
    if (i >= differ_at) cls += " bad";
    out += fmt::format("<span class=\"{}\" title=\"position {}\">{}</span> ", cls, i, m.tokens[i]);
  }
  if (m.tokens.size() > kMaxTokens) out += "\u2026";
  return out + "</span>";
}

}  // namespace

std::string html_metadata(const diff::DiffResult& r) {
  const auto& a = r.expected.metadata;
  const auto& b = r.actual.metadata;
  std::string out =
      "<section class=\"card\" id=\"metadata\">\n<h2>Run metadata</h2>\n"
      "<div class=\"scroll\"><table class=\"meta\"><thead><tr><th></th><th>expected (a)</th>"
      "<th>actual (b)</th></tr></thead><tbody>\n";
  const auto row = [&](std::string_view label, const std::string& va, const std::string& vb,
                       bool compare = true) {
    out += fmt::format("<tr{}><th>{}</th><td>{}</td><td>{}</td></tr>\n",
                       compare && va != vb ? " class=\"differs\"" : "", label, va, vb);
  };
  const auto path = [](const diff::TraceSide& s) {
    return "<code>" + or_dash(s.path) + "</code>" +
           (s.complete ? "" : " <span class=\"status bad\">incomplete</span>");
  };
  row("trace", path(r.expected), path(r.actual), false);
  row("producer", h(std::string(producer_name(a.producer))),
      h(std::string(producer_name(b.producer))));
  row("version", or_dash(a.producer_version), or_dash(b.producer_version));
  row("git commit", "<code>" + or_dash(a.git_commit) + "</code>",
      "<code>" + or_dash(b.git_commit) + "</code>");
  row("model", "<code>" + or_dash(a.model_path) + "</code>",
      "<code>" + or_dash(b.model_path) + "</code>", false);
  row("model sha256", "<code class=\"hash\">" + or_dash(a.model_sha256) + "</code>",
      "<code class=\"hash\">" + or_dash(b.model_sha256) + "</code>");
  row("precision", or_dash(a.precision), or_dash(b.precision));
  row("fault", or_dash(a.fault), or_dash(b.fault));
  row("prompt length", std::to_string(a.prompt_length), std::to_string(b.prompt_length));
  const std::size_t differ_at = first_difference(a.tokens, b.tokens);
  row("tokens", tokens_html(a, differ_at), tokens_html(b, differ_at));
  row("dims", or_dash(dims_text(a.dims)), or_dash(dims_text(b.dims)));
  row("hparams", or_dash(hparams_text(a.hparams)), or_dash(hparams_text(b.hparams)));
  return out + "</tbody></table></div>\n</section>\n";
}

}  // namespace tapdiff::reports
