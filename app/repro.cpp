#include "app/repro.hpp"

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "app/harness.hpp"
#include "app/repro_script.hpp"
#include "diff/compare.hpp"
#include "diff/hypotheses.hpp"
#include "diff/repeats.hpp"
#include "diff/tolerance.hpp"
#include "engine/device/error.hpp"
#include "model/config.hpp"
#include "model/describe.hpp"
#include "model/error.hpp"
#include "model/gguf.hpp"
#include "model/model_part.hpp"
#include "reports/json_number.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/tap_filter.hpp"
#include "tapdiff/trace_reader.hpp"
#include "tapdiff/trace_writer.hpp"
#include "tapdiff/weight_taps.hpp"

namespace tapdiff {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr const char* kManifest = "repro.json";

using reports::json_number;
using reports::json_number_value;

std::string file_sha256(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  return f.sha256();
}

// Whether a trace's filter kept every catalogue tap of every layer and position, attn.probs
// apart: the replay needs the stream and every op's inputs, which attn.probs is not (its
// summary stands for it in a long context).
bool records_every_tap_but_probs(const TraceReader& trace) {
  const TapFilterSpec& spec = trace.filter();
  if (!spec.layers.empty() || !spec.positions.empty()) return false;
  const TapFilter filter = TapFilter::parse(spec);
  const int n_layer = trace.metadata().dims ? int(trace.metadata().dims->n_layer) : 1;
  for (const TapSpec& tap : tap_catalogue()) {
    if (tap.name == "attn.probs") continue;
    if (tap.scope == TapScope::global && !filter.tap_enabled(tap.name, -1)) return false;
    for (int layer = 0; tap.scope == TapScope::layer && layer < n_layer; ++layer)
      if (!filter.tap_enabled(tap.name, layer)) return false;
  }
  return true;
}

// The stage a tap (or the token sequence, "tokens") belongs to (model/model_part.hpp).
int tap_stage(const std::string& name, int layer, int n_layer) {
  if (const auto tensor = weight_tap_tensor(name)) return tensor_stage(*tensor, n_layer);
  if (layer >= 0) return layer;
  return name == "token_embd" ? -1 : n_layer;
}

bool engine_producer(std::optional<Producer> p) { return p == Producer::engine_host || p == Producer::engine_cuda; }

// Whether a run of stages first..last reads the tap: the taps of those stages and the hidden
// state entering the first of them (lockstep's input).
bool part_reads(const TapInfo& tap, int first, int last, int n_layer) {
  const int stage = tap_stage(tap.name, tap.layer, n_layer);
  if (stage == n_layer + 1) return first < n_layer && last >= 0;  // rope_freqs: any layer
  if (stage >= first && stage <= last) return true;
  if (first == 0) return tap.name == "token_embd" && tap.layer == -1;
  return first > 0 && tap.name == "resid.ffn" && tap.layer == first - 1;
}

// The trace's taps of the part, under metadata that names the part's model.
void copy_part_taps(const std::string& source, const std::string& out, int first, int last, int n_layer,
                    const std::string& part_sha256) {
  const TraceReader in(source);
  TraceMetadata m = in.metadata();
  m.model_path = "model.gguf";
  m.model_sha256 = part_sha256;
  m.layouts.clear();  // rows are written as read: in the catalogue's layout
  m.lockstep_source.clear();
  WriterOptions options;
  options.compress = true;  // a repro travels with bug reports: gzip shrinks the streamed file's chunks
  TraceWriter w(out, m, std::move(options));
  for (const TapInfo& tap : in.taps()) {
    if (!part_reads(tap, first, last, n_layer)) continue;
    const TapRows rows = in.read(tap);
    std::size_t start = 0;
    for (std::size_t i = 1; i <= rows.size(); ++i)  // runs of consecutive positions
      if (i == rows.size() || rows.positions[i] != rows.positions[i - 1] + 1) {
        w.record(tap.name, tap.layer, rows.positions[start], std::int64_t(i - start), RowShape(tap.row_shape),
                 rows.row(start));
        start = i;
      }
  }
  w.end_step();
  w.close();
}

json manifest_for(const diff::DiffResult& d, const diff::FirstDivergence& at, const diff::Diagnosis* why,
                  const ReproOptions& o, const std::string& model, const ModelConfig& c) {
  const TraceReader actual(o.actual);
  const TraceMetadata& a = actual.metadata();
  json j;
  j["schema"] = "tapdiff-repro";
  j["schema_version"] = 1;
  const diff::TapComparison* tap = diff::find_tap(d, at.tap);
  // A tap of the wrong shape has no compared rows: its class's threshold in the run's profile.
  const double threshold = tap && tap->threshold_nmse > 0
                               ? tap->threshold_nmse
                               : diff::profile_for_precisions(d.expected.metadata.precision, a.precision)
                                     .threshold(tap ? tap->tap_class : "");
  j["finding"] = {{"tap", at.tap},
                  {"name", at.name},
                  {"layer", at.layer},
                  {"position", at.position},
                  {"shape", at.shape},
                  {"class", why ? why->bug_class : "unexplained"},
                  {"variant", why ? why->variant : ""},
                  {"nmse", json_number(at.metrics.nmse)},
                  {"max_abs", json_number(at.metrics.max_abs)},
                  {"threshold", threshold}};
  j["profile"] = d.profile;
  j["compared_positions"] = d.compared_positions;  // the common token prefix: positions after it ran on other tokens
  j["expected"] = {{"path", o.expected}, {"producer", producer_name(d.expected.metadata.producer)}};
  j["actual"] = {{"path", o.actual}, {"producer", producer_name(a.producer)}};
  j["engine"] = {{"precision", a.precision},
                 {"fault", a.fault == "none" ? "" : a.fault},
                 {"prefill_chunk", diff::prefill_chunk_of(a)}};
  j["model"] = {{"path", model}, {"sha256", file_sha256(model)}};
  j["hparams"] = config_json(c);
  return j;
}

json read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  std::ifstream in(path);
  if (!in) throw InputError(path, "repro", "cannot be opened: expected a directory written by `tapdiff repro`");
  try {
    json j = json::parse(in);
    if (j.value("schema", "") != "tapdiff-repro")
      throw InputError(path, "schema", "expected \"tapdiff-repro\"");
    return j;
  } catch (const json::exception& e) {
    throw InputError(path, "repro", fmt::format("not a repro manifest: {}", e.what()));
  }
}

void write_text(const fs::path& path, const std::string& text, bool executable = false) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out.flush()) throw InputError(path.string(), "repro", "cannot be written");
  if (executable)
    fs::permissions(path, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
}

std::string readme(const json& m) {
  const json& f = m["finding"];
  return fmt::format(
      "# Repro: {} at position {} ({})\n\n"
      "Expected `{}` ({}), actual `{}` ({}); the finding: NMSE {:.3g} against a threshold of {:.3g} "
      "(profile {}).\n{}\n"
      "This directory needs neither the model nor the traces: `model.gguf` holds stages {}..{} of the model "
      "(-1 is the embedding, {} the head), `inputs.h5` the expected trace's taps of those stages (the op's "
      "inputs and expected output), `actual.h5` the actual trace's.\n\n"
      "- `./run.sh` (or `tapdiff replay .`): tapdiff's engine, as built, runs the part in lockstep from the "
      "expected inputs with the run's settings ({}); exit 1 when the tap diverges again, 0 when it does not. "
      "`tapdiff replay . --inject none` runs a clean engine.\n"
      "- `python3 repro.py` (numpy, h5py, gguf): the op replayed with numpy from the actual trace's own "
      "inputs, compared with the actual output; exit 1 with the metrics when they differ. Replace the "
      "actual output with your kernel's (`--actual FILE.npy`) to test a fix without rerunning the model.\n",
      f["tap"].get<std::string>(), f["position"].get<std::int64_t>(), f["class"].get<std::string>(),
      m["expected"]["path"].get<std::string>(), m["expected"]["producer"].get<std::string>(),
      m["actual"]["path"].get<std::string>(), m["actual"]["producer"].get<std::string>(), json_number_value(f["nmse"]),
      f["threshold"].get<double>(), m["profile"].get<std::string>(),
      f["variant"].get<std::string>().empty() ? "" : fmt::format("\nDiagnosis: {}.\n", f["variant"].get<std::string>()),
      m["stages"][0].get<int>(), m["stages"][1].get<int>(), m["hparams"]["n_layer"].get<int>(),
      m["engine"].dump());
}

// The part of stages first..last written into dir, with its traces and manifest.
void write_part(const ReproOptions& o, const GgufFile& model, const ModelConfig& c, json manifest, int first,
                int last) {
  const fs::path dir(o.dir);
  const std::string part = (dir / "model.gguf").string();
  write_model_part(model, c, first, last, part);
  const std::string sha = file_sha256(part);
  copy_part_taps(o.expected, (dir / "inputs.h5").string(), first, last, c.n_layer, sha);
  copy_part_taps(o.actual, (dir / "actual.h5").string(), first, last, c.n_layer, sha);
  manifest["stages"] = {first, last};
  manifest["part_sha256"] = sha;
  write_text(dir / kManifest, manifest.dump(2) + "\n");
  write_text(dir / "README.md", readme(manifest));
}

}  // namespace

ReproWritten write_repro(const ReproOptions& given) {
  ReproOptions o = given;
  if (!o.report.empty()) {
    std::ifstream in(o.report);
    if (!in) throw InputError(o.report, "report", "cannot be opened");
    try {
      const json r = json::parse(in);
      o.expected = r.at("expected").at("path").get<std::string>();
      o.actual = r.at("actual").at("path").get<std::string>();
    } catch (const json::exception& e) {
      throw InputError(o.report, "expected.path, actual.path",
                       fmt::format("expected a tapdiff JSON report (diff or check --format json): {}", e.what()));
    }
  }
  if (fs::exists(o.dir) && !fs::is_empty(o.dir))
    throw std::invalid_argument(fmt::format("-o {}: exists and is not empty; give a new directory", o.dir));
  const TraceReader expected(o.expected);
  if (!records_every_tap_but_probs(expected))
    throw InputError(o.expected, "tap_filter",
                     "expected a trace of every tap (attn.probs may be left out): the replay runs the finding's layer "
                     "from all of its taps (record the expected trace without --taps, --layers or --positions)");
  const std::string model = o.model.empty() ? expected.metadata().model_path : o.model;
  diff::DiffOptions options;
  options.model_path = model;
  options.all = o.root > 1;
  const diff::DiffResult d = diff::diff_traces(o.expected, o.actual, options);
  if (d.verdict == diff::Verdict::incompatible)
    throw std::invalid_argument(fmt::format("{} and {} cannot be compared: {}", o.expected, o.actual,
                                            d.findings.empty() ? "" : d.findings.front().detail));
  const diff::FirstDivergence* at = nullptr;
  const diff::Diagnosis* why = nullptr;
  if (o.root == 1) {
    const diff::LeadingFinding leading = diff::leading_finding(d);
    at = leading.at;
    why = leading.diagnosis;
  } else if (std::size_t(o.root) <= d.roots.size()) {
    const diff::RootFinding& r = d.roots[std::size_t(o.root - 1)];
    at = &r.at;
    why = r.diagnosis ? &*r.diagnosis : nullptr;
  } else {
    throw std::invalid_argument(fmt::format("--root {}: the diff has {} independent roots", o.root, d.roots.size()));
  }
  if (at == nullptr)
    throw std::invalid_argument(fmt::format("{} and {} agree: nothing to reproduce", o.expected, o.actual));

  const GgufFile file = GgufFile::open(model);
  const ModelConfig c = load_model_config(file);
  const json manifest = manifest_for(d, *at, why, o, model, c);
  fs::create_directories(o.dir);
  write_text(fs::path(o.dir) / "run.sh", "#!/bin/sh\n# Replays this repro with tapdiff's engine (README.md).\n"
                                         "exec \"${TAPDIFF:-tapdiff}\" replay \"$(dirname \"$0\")\" \"$@\"\n",
             true);
  write_text(fs::path(o.dir) / "repro.py", std::string(kReproScript), true);

  // The finding's own stage first; wider when the bug needs more of the model to show.
  const int stage = tap_stage(at->name, at->layer, c.n_layer);
  std::vector<std::pair<int, int>> parts;
  if (stage <= c.n_layer) parts.emplace_back(stage, stage);
  if (stage >= 0 && stage < c.n_layer) parts.emplace_back(0, c.n_layer - 1);
  parts.emplace_back(-1, c.n_layer);
  ReproWritten out;
  out.tap = at->tap;
  out.position = at->position;
  for (const auto& [first, last] : parts) {
    write_part(o, file, c, manifest, first, last);
    out.first_stage = first;
    out.last_stage = last;
    if (!engine_producer(d.actual.metadata.producer)) break;  // another engine's bug: nothing here replays it
    out.reproduced = replay_repro(o.dir, std::nullopt).diverged;
    if (*out.reproduced) break;
  }
  return out;
}

ReplayOutcome replay_repro(const std::string& dir, const std::optional<std::string>& fault) {
  const json m = read_manifest(dir);
  const json& f = m.at("finding");
  const std::string producer = m.at("actual").at("producer");
  if (!engine_producer(parse_producer(producer)))
    throw std::invalid_argument(fmt::format("{}: the actual trace came from {}, not tapdiff's engine: replay its op "
                                            "with `python3 {}/repro.py`",
                                            dir, producer, dir));
  const fs::path tmp = fs::temp_directory_path() / fmt::format("tapdiff-replay-{}", getpid());
  fs::create_directories(tmp);
  struct Remove {
    fs::path p;
    ~Remove() {
      std::error_code ignored;
      fs::remove_all(p, ignored);
    }
  } remove{tmp};

  RunSpec run;
  run.backend = "host";
  run.model = (fs::path(dir) / "model.gguf").string();
  run.lockstep = (fs::path(dir) / "inputs.h5").string();
  run.precision = m.at("engine").at("precision");
  run.fault = fault ? (*fault == "none" ? "" : *fault) : m.at("engine").at("fault").get<std::string>();
  run.prefill_chunk = m.at("engine").at("prefill_chunk");
  run.weights = weight_tap_tensor(f.at("name").get<std::string>()) ? "auto" : "";
  run.progress = false;
  run.trace = (tmp / "replay.h5").string();
  const std::string tap = f.at("tap");
  ReplayOutcome out;
  try {
    run_model(run);
  } catch (const engine::EngineError& e) {
    out.diverged = true;
    out.text = fmt::format("REPRODUCED {}: the engine fails: {}\n", tap, e.what());
    return out;
  }
  diff::DiffOptions options;
  options.model_path = run.model;
  diff::DiffResult d = diff::diff_traces(run.lockstep, run.trace, options);
  if (f.at("class") == "nondeterministic")
    if (const auto differ = repeat_engine(run, 2)) diff::put_nondeterminism_first(differ->first, differ->second, d);
  for (const diff::RootFinding& r : d.roots) {
    if (r.at.tap != tap) continue;
    out.diverged = true;
    out.text = fmt::format("REPRODUCED {} @ {}{}: nmse {:.3g}, max abs {:.3g} (the finding: nmse {:.3g} at {})\n",
                           tap, r.at.position,
                           r.diagnosis ? fmt::format(" · {} ({})", r.diagnosis->bug_class, r.diagnosis->variant) : "",
                           r.at.metrics.nmse, r.at.metrics.max_abs, json_number_value(f.at("nmse")),
                           f.at("position").get<std::int64_t>());
    return out;
  }
  if (tap == "tokens" && d.first && d.first->tap == "tokens") {
    out.diverged = true;
    out.text = fmt::format("REPRODUCED tokens: the sequence differs from position {}\n", d.first->position);
    return out;
  }
  out.text = fmt::format("PASS {}: within the {} profile at every position (the finding was nmse {:.3g} at {})\n", tap,
                         d.profile, json_number_value(f.at("nmse")), f.at("position").get<std::int64_t>());
  return out;
}

}  // namespace tapdiff
