#include "sample_results.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace tapdiff::reports::testing {
namespace {

constexpr int kLayers = 4;
constexpr std::int64_t kPrompt = 8;
constexpr std::int64_t kPositions = 16;
const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct TapSpec {
  const char* name;
  const char* tap_class;
  double threshold;
};

// The catalogue's per-layer taps in execution order with their f16 tolerance class.
constexpr TapSpec kLayerTaps[] = {{"attn_norm", "norm", 1e-4},
                                  {"attn_q", "projection", 1e-4},
                                  {"attn_k", "projection", 1e-4},
                                  {"attn_v", "projection", 1e-4},
                                  {"attn_q.rope", "rope", 1e-4},
                                  {"attn_k.rope", "rope", 1e-4},
                                  {"kv.k", "cache", 1e-4},
                                  {"kv.v", "cache", 1e-4},
                                  {"attn.probs", "attention", 1e-3},
                                  {"attn.out", "attention", 1e-3},
                                  {"attn_output", "projection", 1e-4},
                                  {"resid.attn", "residual", 1e-4},
                                  {"ffn_norm", "norm", 1e-4},
                                  {"ffn_gate", "projection", 1e-4},
                                  {"ffn_up", "projection", 1e-4},
                                  {"ffn.act", "activation", 1e-4},
                                  {"ffn_down", "projection", 1e-4},
                                  {"resid.ffn", "residual", 1e-4}};

// Deterministic jitter in [0.5, 2): the same value for the same arguments on every machine.
double jitter(int a, std::int64_t b, int c) {
  std::uint32_t x = static_cast<std::uint32_t>(a) * 73856093u ^
                    static_cast<std::uint32_t>(b) * 19349663u ^
                    static_cast<std::uint32_t>(c) * 83492791u;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return 0.5 + 1.5 * (x % 10000) / 10000.0;
}

TraceMetadata metadata(Producer producer, const std::string& precision, const std::string& fault) {
  TraceMetadata m;
  m.producer = producer;
  m.producer_version = "0.1.0";
  m.git_commit = "aaa0604c2f1e";
  m.model_path = "build/demo/tiny-llama.gguf";
  m.model_sha256 = "3f9a0c1d2e4b5a6978c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d";
  m.hparams = {{"general.architecture", std::string("llama")},
               {"llama.rope.freq_base", 10000.0},
               {"llama.block_count", std::int64_t{kLayers}}};
  m.precision = precision;
  m.fault = fault;
  m.prompt_length = kPrompt;
  for (std::int64_t p = 0; p < kPositions; ++p)
    m.tokens.push_back(static_cast<std::int32_t>(1 + (p * 37) % 251));
  m.dims = TapDims{kLayers, 64, 4, 2, 16, 172, 256, kPositions};
  return m;
}

diff::TapComparison tap(const std::string& name, int layer, const std::string& tap_class,
                        double threshold, std::vector<std::int64_t> shape) {
  diff::TapComparison t;
  t.name = name;
  t.layer = layer;
  t.full_name = layer >= 0 ? "blk." + std::to_string(layer) + "." + name : name;
  t.tap_class = tap_class;
  t.row_shape = std::move(shape);
  t.threshold_nmse = threshold;
  t.jump_factor = 100;
  return t;
}

diff::RowMetrics noise_row(std::int64_t position, int layer, int index) {
  diff::RowMetrics r;
  r.position = position;
  r.nmse = 2e-8 * (1 + 0.6 * (layer + 1)) * jitter(layer, position, index);
  r.input_nmse = r.nmse * 0.8;
  r.max_abs = std::sqrt(r.nmse) * 3;
  r.max_rel = r.max_abs * 4;
  r.cosine = 1 - r.nmse / 2;
  r.worst_index = (index * 7 + position) % 64;
  r.worst_expected = 0.5f;
  r.worst_actual = static_cast<float>(0.5 + r.max_abs);
  return r;
}

// The clean run's taps: f16 noise everywhere, logits only from the last prompt position on.
std::vector<diff::TapComparison> clean_taps() {
  std::vector<diff::TapComparison> taps;
  const auto fill = [](diff::TapComparison t, int layer, int index, std::int64_t from) {
    for (std::int64_t p = from; p < kPositions; ++p) t.rows.push_back(noise_row(p, layer, index));
    for (const auto& r : t.rows) t.min_passing_nmse = std::max(t.min_passing_nmse, r.nmse);
    return t;
  };
  taps.push_back(fill(tap("token_embd", -1, "embedding", 1e-6, {64}), -1, 0, 0));
  for (int l = 0; l < kLayers; ++l) {
    int i = 0;
    for (const auto& spec : kLayerTaps) {
      std::vector<std::int64_t> shape{64};
      if (std::string(spec.name) == "attn.probs") shape = {4, kPositions};
      taps.push_back(fill(tap(spec.name, l, spec.tap_class, spec.threshold, shape), l, ++i, 0));
    }
  }
  taps.push_back(fill(tap("output_norm", -1, "norm", 1e-4, {64}), kLayers, 19, 0));
  taps.push_back(fill(tap("output", -1, "logits", 1e-3, {256}), kLayers, 20, kPrompt - 1));
  return taps;
}

diff::LogitsSummary logits(bool broken) {
  diff::LogitsSummary l;
  double sum = 0, sum_sq = 0;
  for (std::int64_t p = kPrompt - 1; p < kPositions; ++p) {
    diff::LogitsSummary::Position pos;
    pos.position = p;
    const bool bad = broken && p >= kPrompt;
    pos.kl = bad ? 0.04 * jitter(3, p, 1) * (1 + p - kPrompt) : 3e-7 * jitter(5, p, 2);
    pos.same_top1 = !(bad && (p == 10 || p == 12 || p == 13 || p == 15));
    const int t0 = static_cast<int>(11 + (p * 29) % 200);
    for (int k = 0; k < 5; ++k) {
      pos.top_expected.emplace_back(t0 + 3 * k, static_cast<float>(14.5 - 1.3 * k));
      const int shift = bad ? ((k % 2) ? 1 : 0) : 0;
      pos.top_actual.emplace_back(t0 + 3 * k + shift,
                                  static_cast<float>(14.5 - 1.3 * k - (bad ? 0.4 : 0)));
    }
    if (!pos.same_top1) std::swap(pos.top_actual[0], pos.top_actual[1]);
    pos.top5_overlap = bad ? 3 : 5;
    sum += pos.kl;
    sum_sq += pos.kl * pos.kl;
    l.positions.push_back(pos);
  }
  l.n_positions = static_cast<std::int64_t>(l.positions.size());
  const double n = static_cast<double>(l.n_positions);
  l.kl_mean = sum / n;
  l.kl_stderr = std::sqrt((sum_sq / n - l.kl_mean * l.kl_mean) / (n - 1));
  l.kl_max = broken ? 0.42 : 5.6e-7;
  const double scale = broken ? 1 : 1e-6;
  l.kl_percentiles = {{99.9, 0.419 * scale}, {99, 0.41 * scale}, {95, 0.37 * scale},
                      {90, 0.33 * scale},    {50, 0.12 * scale}, {10, 2e-6 * scale},
                      {1, 4e-7 * scale}};
  int same = 0;
  for (const auto& p : l.positions) same += p.same_top1 ? 1 : 0;
  l.same_top1_rate = same / n;
  l.mean_top5_overlap = broken ? 3.89 : 5;
  if (broken) l.first_greedy_difference = 10;
  return l;
}

diff::TapComparison& find(diff::DiffResult& r, const std::string& full_name) {
  for (auto& t : r.taps)
    if (t.full_name == full_name) return t;
  throw std::logic_error("sample result has no tap " + full_name);
}

diff::DiffResult base(const std::string& precision, const std::string& fault) {
  diff::DiffResult r;
  r.expected.path = "build/demo/reference.h5";
  r.expected.metadata = metadata(Producer::reference, "f32", "none");
  r.actual.path = "build/demo/engine-host.h5";
  r.actual.metadata = metadata(Producer::engine_host, precision, fault);
  r.profile = precision;
  r.compared_positions = kPositions;
  return r;
}

// A root at `full_name` (roots are listed in execution order): every row from `from` on diverged with the given nmse.
diff::RootFinding root_at(diff::DiffResult& r, const std::string& full_name, std::int64_t from, double nmse,
                          const std::string& cls, const std::string& variant) {
  diff::TapComparison& t = find(r, full_name);
  for (auto& row : t.rows)
    if (row.position >= from) {
      row.nmse = nmse;
      row.input_nmse = 0;
      row.diverged = true;
    }
  diff::RootFinding root;
  root.at.tap = full_name;
  root.at.name = t.name;
  root.at.layer = t.layer;
  root.at.position = std::max(from, t.rows.front().position);
  for (const auto& row : t.rows)
    if (row.diverged) root.at.diverged_positions.push_back(row.position);
  root.at.pattern = root.at.position == t.rows.front().position ? diff::PositionPattern::all
                                                                 : diff::PositionPattern::from;
  root.at.metrics = *t.first_diverged();
  diff::Diagnosis d;
  d.bug_class = cls;
  d.evidence = diff::Evidence::reproduced;
  d.variant = variant;
  d.residual = 1e-14;
  d.baseline_residual = nmse;
  d.explanation = full_name + " is reproduced by \"" + variant + "\".";
  root.diagnosis = d;
  return root;
}

}  // namespace

diff::DiffResult lockstep_result() {
  diff::DiffResult r = base("f32", "bias-dropped,rope-wrong-pairing,lm-head-op-n");
  r.actual.metadata.lockstep_source = r.expected.path;
  r.mode = diff::DiffMode::lockstep;
  r.verdict = diff::Verdict::diverged;
  r.taps = clean_taps();
  r.roots.push_back(root_at(r, "blk.0.attn_q", 0, 0.08, "bias", "W x without the bias"));
  root_at(r, "blk.0.attn_k", 0, 0.1, "bias", "W x without the bias");
  r.roots.back().explained = {"blk.0.attn_k"};
  r.roots.push_back(root_at(r, "blk.0.attn_q.rope", 1, 0.3, "rope",
                            "pairs taken the other way (adjacent NORM instead of half-split NEOX)"));
  diff::RootFinding shape;
  shape.kind = "shape";
  shape.at.tap = "blk.1.ffn_gate";
  shape.at.name = "ffn_gate";
  shape.at.layer = 1;
  shape.expected_shape = {172};
  shape.actual_shape = {64};
  shape.explained = {"blk.1.ffn_up"};
  diff::Diagnosis d;
  d.bug_class = "shape";
  d.evidence = diff::Evidence::indicated;
  d.variant = "width 172 expected, 64 actual: n_embd used where n_ff belongs";
  shape.diagnosis = d;
  r.roots.push_back(shape);
  r.roots.push_back(root_at(r, "output", 0, 2.2, "matmul-layout",
                            "W^T x: the weight read transposed (op flag / leading dimension)"));
  r.findings.push_back({"shape", "blk.1.ffn_gate", "row shape [172] in the expected trace, [64] in the actual trace",
                        {172}, {64}});
  r.first = r.roots.front().at;
  r.diagnosis = r.roots.front().diagnosis;
  return r;
}

diff::DiffResult passing_result() {
  diff::DiffResult r = base("f16", "none");
  r.taps = clean_taps();
  r.logits = logits(false);
  r.findings.push_back(
      {"metadata", "", "precision differs: expected f32, actual f16 (benign under profile f16)"});
  return r;
}

diff::DiffResult diverged_result() {
  diff::DiffResult r = base("f16", "kv-stuck-length");
  r.verdict = diff::Verdict::diverged;
  r.taps = clean_taps();
  // From blk.0.attn.probs on, every decode position carries the error forward; the KV cache
  // write itself (kv.k, kv.v of layer 0) is intact.
  bool downstream = false;
  int index = 0;
  for (auto& t : r.taps) {
    ++index;
    if (t.full_name == "blk.0.attn.probs") downstream = true;
    if (!downstream || (t.layer == 0 && t.name.rfind("kv.", 0) == 0)) continue;
    for (auto& row : t.rows) {
      if (row.position < kPrompt) continue;
      const double size =
          t.full_name == "blk.0.attn.probs" ? 0.45 : (t.tap_class == "residual" ? 0.02 : 0.08);
      row.input_nmse = t.full_name == "blk.0.attn.probs" ? row.nmse : size;
      row.nmse = size * jitter(index, row.position, 9);
      row.max_abs = std::sqrt(row.nmse) * 2.5;
      row.max_rel = row.max_abs * 6;
      row.cosine = 1 - row.nmse / 2;
      row.diverged = true;
    }
    t.min_passing_nmse = 0;
    for (const auto& row : t.rows) t.min_passing_nmse = std::max(t.min_passing_nmse, row.nmse);
  }
  // blk.3.ffn.act is missing from the actual trace.
  r.taps.erase(std::remove_if(r.taps.begin(), r.taps.end(),
                              [](const auto& t) { return t.full_name == "blk.3.ffn.act"; }),
               r.taps.end());
  r.findings.push_back(
      {"metadata", "", "precision differs: expected f32, actual f16 (benign under profile f16)"});
  r.findings.push_back({"missing-in-actual", "blk.3.ffn.act",
                        "the actual trace has no blk.3.ffn.act (expected 16 rows of [172])"});

  diff::FirstDivergence f;
  f.tap = "blk.0.attn.probs";
  f.name = "attn.probs";
  f.layer = 0;
  f.position = kPrompt;
  f.pattern = diff::PositionPattern::from;
  for (std::int64_t p = kPrompt; p < kPositions; ++p) f.diverged_positions.push_back(p);
  diff::TapComparison& probs = find(r, "blk.0.attn.probs");
  f.metrics = probs.rows[kPrompt];
  f.metrics.worst_index = 1 * kPositions + 3;  // head 1, key position 3
  f.metrics.worst_expected = 0.2137f;
  f.metrics.worst_actual = 0;
  f.metrics.input_nmse = 3.1e-8;
  probs.rows[kPrompt] = f.metrics;
  r.first = f;

  diff::Diagnosis d;
  d.bug_class = "kv-cache";
  d.evidence = diff::Evidence::reproduced;
  d.variant = "attention over position p only (KV length never advances)";
  d.residual = 1.8e-15;
  d.baseline_residual = 0.47;
  d.runners_up = {{"attention over the whole cache capacity (unsliced)", 0.39, "kv-cache"},
                  {"KV write offset advances by one element", 0.31, "kv-cache"}};
  d.signatures = {"prompt positions 0-7 intact", "first diverges at the first decode position (8)",
                  "attn.probs: all weight on the current position",
                  "kv.k, kv.v intact at layer 0: the cache write is correct"};
  d.explanation =
      "From position 8 on, blk.0.attn.probs puts all of its weight on the current position: "
      "exactly what attention over position p alone computes (residual 1.8e-15), while the cache "
      "slots read back correctly. The KV cache length is not advanced after each step; inspect "
      "the cache length bookkeeping of the decode loop (engine/kv_cache).";
  r.diagnosis = d;
  r.logits = logits(true);
  return r;
}

diff::DiffResult incompatible_result() {
  diff::DiffResult r = base("f32", "none");
  r.verdict = diff::Verdict::incompatible;
  r.compared_positions = 0;
  r.actual.metadata.model_sha256 =
      "9a0b1c2d3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccddeeff";
  r.actual.metadata.model_path = "models/other.gguf";
  r.findings.push_back(
      {"metadata", "",
       "different models: expected sha256 3f9a0c1d…4b5c6d, actual sha256 9a0b1c2d…ddeeff"});
  return r;
}

diff::DiffResult hostile_result() {
  diff::DiffResult r = base("f32", "weird <fault> & \"quotes\"");
  r.verdict = diff::Verdict::diverged;
  r.expected.path = kHostilePath;
  r.actual.path = "/tmp/ctl\x01\x1b[31mred\x1b[0m\xff\xfe-invalid-utf8 ]]> -- <!-- .h5";
  r.actual.complete = false;
  r.actual.metadata.hparams["nan.param"] = kNaN;
  r.actual.metadata.hparams["name<&>"] = std::string("value \"'<b>");
  r.taps = clean_taps();
  {
    diff::TapComparison& t = find(r, "blk.1.attn_q");
    t.full_name = kHostileTap;
    for (auto& row : t.rows) {
      if (row.position < 3) continue;
      row.nmse = kNaN;
      row.max_abs = std::numeric_limits<double>::infinity();
      row.max_rel = kNaN;
      row.cosine = kNaN;
      row.nonfinite = 12;
      row.worst_actual = std::numeric_limits<float>::quiet_NaN();
      row.diverged = true;
    }
    t.min_passing_nmse = kNaN;
  }
  r.findings.push_back(
      {"shape", "blk.2.attn_k<script>", "shape [64] vs [32] & <b>bold</b> | pipe `tick`"});
  diff::FirstDivergence f;
  f.tap = kHostileTap;
  f.name = "attn_q<&>\"'";
  f.layer = 1;
  f.position = 3;
  f.pattern = diff::PositionPattern::some;
  f.diverged_positions = {3, 4, 5};
  f.metrics = find(r, kHostileTap).rows[3];
  r.first = f;
  diff::Diagnosis d;
  d.bug_class = "non-finite";
  d.evidence = diff::Evidence::indicated;
  d.residual = kNaN;
  d.baseline_residual = std::numeric_limits<double>::infinity();
  d.signatures = {"NaN <first> & \"origin\""};
  d.explanation = "The first non-finite value appears in attn_q <&> \"'\n(newline) \x1b[2J.";
  r.diagnosis = d;
  r.logits = logits(true);
  r.logits->kl_mean = kNaN;
  r.logits->kl_max = std::numeric_limits<double>::infinity();
  r.logits->positions[2].kl = kNaN;
  return r;
}

std::vector<NamedResult> all_results() {
  return {{"passing", passing_result()},
          {"diverged", diverged_result()},
          {"lockstep", lockstep_result()},
          {"incompatible", incompatible_result()},
          {"hostile", hostile_result()}};
}

int count_occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace tapdiff::reports::testing
