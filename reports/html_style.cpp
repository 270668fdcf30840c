// The HTML report's stylesheet: system fonts only, light theme, print-friendly.
#include "reports/html_parts.hpp"

namespace tapdiff::reports {

const std::string_view kHtmlStyle = R"css(
:root {
  --bg: #f5f6f8; --card: #fff; --line: #e2e5ea; --text: #1d2330; --quiet: #667085;
  --bad: #c0262d; --bad-bg: #fdeeee; --ok: #16794a; --ok-bg: #e9f7ef;
  --warn: #a15c00; --warn-bg: #fff5e6; --accent: #3b5bdb;
  --mono: ui-monospace, "SFMono-Regular", "JetBrains Mono", Menlo, Consolas, "DejaVu Sans Mono", monospace;
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--text);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 24px 40px; }
code, .num, .mono { font-family: var(--mono); font-size: 12.5px; }
.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.quiet { color: var(--quiet); }
.bad { color: var(--bad); }
b { font-weight: 600; }
header.top { display: flex; align-items: baseline; gap: 12px; margin-bottom: 12px; }
header.top .brand { font-weight: 700; font-size: 18px; letter-spacing: .02em; }
header.top .what { color: var(--quiet); }
footer { margin-top: 22px; color: var(--quiet); font-size: 12px; text-align: center; }

.banner { border-radius: 12px; padding: 18px 22px; margin-bottom: 16px; border: 1px solid; }
.banner.pass { background: var(--ok-bg); border-color: #b7e4c7; }
.banner.diverged { background: var(--bad-bg); border-color: #f5c2c4; }
.banner.incompatible { background: var(--warn-bg); border-color: #f7d9a8; }
.banner .verdict { display: inline-block; font-weight: 800; font-size: 13px; letter-spacing: .08em;
  padding: 3px 10px; border-radius: 999px; color: #fff; }
.banner.pass .verdict { background: var(--ok); }
.banner.diverged .verdict { background: var(--bad); }
.banner.incompatible .verdict { background: var(--warn); }
.banner .headline { font-size: 24px; font-weight: 650; margin: 8px 0 2px; word-break: break-word; }
.banner .because { font-size: 15px; margin-bottom: 4px; }
.facts { display: flex; flex-wrap: wrap; gap: 6px 18px; margin-top: 10px; font-size: 13px; }
.fact .k, .chips .k, .tile .k { color: var(--quiet); text-transform: uppercase; font-size: 11px;
  letter-spacing: .06em; margin-right: 4px; }

.card { background: var(--card); border: 1px solid var(--line); border-radius: 12px;
  padding: 16px 20px; margin-bottom: 16px; box-shadow: 0 1px 2px rgba(16,24,40,.04); min-width: 0; }
.card h2 { font-size: 15px; margin: 0 0 12px; display: flex; align-items: center; gap: 10px; }
.card h2 .count { color: var(--quiet); font-weight: 400; font-size: 13px; }
.pair { display: grid; grid-template-columns: minmax(0, 5fr) minmax(0, 7fr); gap: 16px; }
.pair .card { margin-bottom: 16px; }
@media (max-width: 900px) { .pair { grid-template-columns: 1fr; } }

.where { font-size: 16px; margin: 0 0 10px; }
.where code.tap { font-size: 15px; background: var(--bad-bg); color: var(--bad); padding: 2px 6px;
  border-radius: 6px; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 5px 14px; margin: 0; }
dl.kv dt { color: var(--quiet); }
dl.kv dd { margin: 0; }
.badge { background: #eef2ff; color: var(--accent); border: 1px solid #c7d2fe; border-radius: 999px;
  padding: 1px 10px; font-size: 13px; font-weight: 600; font-family: var(--mono); }
.explanation { margin: 0 0 12px; padding: 10px 12px; background: #f8f9fb; border-left: 3px solid var(--accent);
  border-radius: 4px; }
.chips { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; margin-top: 12px; }
.chip { background: #f1f3f6; border: 1px solid var(--line); border-radius: 999px; padding: 1px 10px;
  font-size: 12.5px; }
.kind { font-family: var(--mono); font-size: 12px; background: var(--warn-bg); color: var(--warn);
  padding: 1px 7px; border-radius: 5px; }

table { border-collapse: collapse; width: 100%; font-size: 13px; }
th { text-align: left; font-weight: 600; color: var(--quiet); font-size: 12px; }
th, td { padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
tbody tr:last-child td, tbody tr:last-child th { border-bottom: none; }
.r { text-align: right; }
.scroll { overflow-x: auto; }
table.hypotheses td:first-child { width: 55%; }
table.hypotheses tr.best td { font-weight: 600; background: var(--ok-bg); }
table.hypotheses tr.baseline td { color: var(--quiet); }
.bar { display: inline-block; width: 120px; height: 8px; background: #eef0f3; border-radius: 4px;
  vertical-align: middle; overflow: hidden; }
.bar span { display: block; height: 100%; background: #98a2b3; }
.bar.best span { background: var(--ok); }
.bar.baseline span { background: var(--bad); }
table.taps tr.diverged td { background: #fff8f8; }
table.taps tr.first td { background: var(--bad-bg); }
table.taps tr.first td:first-child { box-shadow: inset 3px 0 0 var(--bad); }
.status { font-size: 11px; font-weight: 700; padding: 1px 7px; border-radius: 999px;
  text-transform: uppercase; letter-spacing: .04em; white-space: nowrap; }
.status.ok { background: var(--ok-bg); color: var(--ok); }
.status.bad { background: var(--bad); color: #fff; }
.status.nonfinite { background: var(--warn-bg); color: var(--warn); }
.status.inherited { background: var(--warn-bg); color: var(--warn); }
.status.first { background: #fff; color: var(--bad); border: 1px solid var(--bad); }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px;
  vertical-align: -1px; border: 1px solid rgba(0,0,0,.15); }
.swatch.nonfinite { background: repeating-linear-gradient(45deg, #1f1f1f 0 3px, #ff4f8b 3px 6px); }
details { margin-top: 10px; }
summary { cursor: pointer; color: var(--accent); font-weight: 500; }

.legend-row { margin: -4px 0 6px; }
.maps { display: flex; flex-wrap: wrap; gap: 10px 36px; align-items: flex-start; }
figure.map { margin: 0; width: min-content; max-width: 100%; }
figure.map figcaption { font-size: 12.5px; color: var(--quiet); margin-bottom: 4px; min-width: 340px; }
figure.map figcaption b { color: var(--text); font-weight: 600; display: block; }
svg text { fill: #344054; font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
svg .tick { font-size: 11px; }
svg .axis { font-size: 12px; font-weight: 600; fill: #475467; }
svg .note { font-size: 10.5px; fill: var(--quiet); font-style: italic; }
svg .grid-bg { fill: #f2f4f7; }
svg .diverged { fill: #fff; stroke: #101828; stroke-width: 1; }
svg .first { fill: none; stroke: #e0115f; stroke-width: 2.5; }
svg .boundary { stroke: #101828; stroke-width: 1.5; stroke-dasharray: 4 3; }
svg .tickmark, svg .gridline { stroke: #d0d5dd; stroke-width: 1; }
svg .klbar { fill: #5b7cfa; }
svg .klbar.differs { fill: var(--bad); }

.tiles { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 10px;
  margin-bottom: 12px; }
.tile { border: 1px solid var(--line); border-radius: 10px; padding: 10px 12px; background: #fafbfc; }
.tile .v { font-family: var(--mono); font-size: 17px; font-weight: 600; }
.tile .v small { font-size: 12px; color: var(--quiet); font-weight: 400; }
.tile.warn { background: var(--warn-bg); border-color: #f7d9a8; }
.tile.bad { background: var(--bad-bg); border-color: #f5c2c4; }
.tile.bad .v { color: var(--bad); }
.kl-row { display: flex; flex-wrap: wrap; gap: 12px 40px; align-items: flex-start; margin-bottom: 8px; }
.kl-row figure { margin: 0; }
.kl-row figcaption, p.key { font-size: 12.5px; color: var(--quiet); margin: 4px 0 0; }
table.percentiles { width: auto; }
table.percentiles th[scope=row] { color: var(--quiet); font-weight: 600; }
table.logits tr.differs td { background: var(--bad-bg); }
td.toks { white-space: nowrap; }
.tok { display: inline-block; font-family: var(--mono); font-size: 12px; border: 1px solid var(--line);
  background: #f8f9fb; border-radius: 6px; padding: 0 6px; margin: 1px 3px 1px 0; }
.tok small { color: var(--quiet); margin-left: 5px; font-size: 10.5px; }
.tok.top1 { font-weight: 700; border-color: #98a2b3; background: #fff; }
.tok.only { border-style: dashed; border-color: var(--warn); background: var(--warn-bg); }
table.meta th:first-child { width: 130px; }
table.meta td { overflow-wrap: anywhere; width: 43%; }
table.meta tr.differs td { background: var(--warn-bg); }
table.meta tr.differs th::after { content: " \2260"; color: var(--warn); }
code.hash { font-size: 11.5px; word-break: break-all; }
.tokens span { font-family: var(--mono); font-size: 11.5px; }
.tokens .p { color: #344054; }
.tokens .g { color: var(--accent); }
.tokens .bad { color: var(--bad); font-weight: 700; }
@media print { body { background: #fff; } .card { box-shadow: none; break-inside: avoid; } }
)css";

}  // namespace tapdiff::reports
