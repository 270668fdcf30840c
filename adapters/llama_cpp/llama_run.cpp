#include "adapters/llama_cpp/llama_run.hpp"

#include <algorithm>
#include <numeric>
#include <array>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <stdexcept>
#include <thread>
#include <utility>

#include <ggml-backend.h>
#include <ggml-cpu.h>
#include <ggml.h>
#include <llama.h>

#include "adapters/llama_cpp/node_map.hpp"
#include "model/error.hpp"
#include "model/gguf.hpp"
#include "tapdiff/tap_catalogue.hpp"
#include "tapdiff/trace_metadata.hpp"
#include "tapdiff/trace_writer.hpp"

namespace tapdiff::adapters::llama_cpp {

bool available(std::string*) { return true; }

namespace {

// llama.cpp logs through one process-wide callback: keep its last warnings and errors for
// error messages instead of printing them, and the metadata overrides it applied (drop the rest).
struct LlamaLog {
  std::mutex mutex;
  std::vector<std::string> lines;
  std::string partial;
  std::set<std::string> overrides_applied;  // keys of "Using metadata override (TYPE) 'KEY' = "
  // "attn_rot_k = N" and "attn_rot_v = N": whether the KV cache stores K and V rotated by a
  // Hadamard transform (llama.cpp turns it on for quantized caches).
  std::map<std::string, std::int64_t> rotations;

  static void callback(ggml_log_level level, const char* text, void* user) {
    auto* log = static_cast<LlamaLog*>(user);
    static thread_local bool keep = false;  // a CONT line continues the previous message
    if (level != GGML_LOG_LEVEL_CONT) keep = level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR;
    const std::string_view message(text);
    if (level == GGML_LOG_LEVEL_INFO && message.find("Using metadata override") != std::string_view::npos) {
      const std::size_t open = message.find('\''), close = message.find('\'', open + 1);
      std::lock_guard<std::mutex> lock(log->mutex);
      if (close != std::string_view::npos) log->overrides_applied.emplace(message.substr(open + 1, close - open - 1));
    }
    if (level == GGML_LOG_LEVEL_INFO)
      for (const char* key : {"attn_rot_k", "attn_rot_v"})
        if (const std::size_t at = message.find(std::string(key) + " = "); at != std::string_view::npos) {
          std::lock_guard<std::mutex> lock(log->mutex);
          log->rotations[key] = std::atoll(std::string(message.substr(at + std::strlen(key) + 3)).c_str());
        }
    if (!keep) return;
    std::lock_guard<std::mutex> lock(log->mutex);
    log->partial += text;
    for (std::size_t nl; (nl = log->partial.find('\n')) != std::string::npos;) {
      log->lines.push_back(log->partial.substr(0, nl));
      log->partial.erase(0, nl + 1);
      if (log->lines.size() > 8) log->lines.erase(log->lines.begin());
    }
  }
  std::set<std::string> take_overrides_applied() {
    std::lock_guard<std::mutex> lock(mutex);
    return std::exchange(overrides_applied, {});
  }
  std::map<std::string, std::int64_t> take_rotations() {
    std::lock_guard<std::mutex> lock(mutex);
    return std::exchange(rotations, {});
  }
  std::string tail() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (const auto& l : lines) out += (out.empty() ? "" : " | ") + l;
    return out;
  }
};

LlamaLog& llama_log() {
  static LlamaLog log;
  static std::once_flag once;
  std::call_once(once, [] {
    llama_log_set(&LlamaLog::callback, &log);
    llama_backend_init();
  });
  return log;
}

ggml_type parse_cache_type(const std::string& name) {
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name(static_cast<ggml_type>(t));
    if (n != nullptr && name == n) return static_cast<ggml_type>(t);
  }
  throw std::invalid_argument(
      fmt::format("--llama-kv-type: expected a ggml type name (f32, f16, bf16, q8_0, q4_0, ...), got \"{}\"", name));
}

// The whole of text as a number, or nothing.
std::optional<double> parse_double(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return !text.empty() && end == text.c_str() + text.size() ? std::optional<double>(v) : std::nullopt;
}
std::optional<std::int64_t> parse_int(const std::string& text) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  return !text.empty() && end == text.c_str() + text.size() ? std::optional<std::int64_t>(v) : std::nullopt;
}

llama_model_kv_override parse_override(const std::string& text) {
  const std::size_t eq = text.find('=');
  const std::size_t colon = eq == std::string::npos ? eq : text.find(':', eq);
  auto fail = [&](const std::string& why) {
    return std::invalid_argument(fmt::format(
        "--llama-override: expected KEY=TYPE:VALUE with TYPE int, float, bool or str (e.g. "
        "llama.rope.freq_base=float:5000), got \"{}\": {}", text, why));
  };
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos) throw fail("no KEY=TYPE:VALUE");
  llama_model_kv_override o{};
  const std::string key = text.substr(0, eq);
  const std::string type = text.substr(eq + 1, colon - eq - 1);
  const std::string value = text.substr(colon + 1);
  if (key.size() >= sizeof o.key) throw fail(fmt::format("the key is longer than {} bytes", sizeof o.key - 1));
  std::memcpy(o.key, key.c_str(), key.size() + 1);
  const auto not_a = [&] { return fail(fmt::format("\"{}\" is not a {}", value, type)); };
  if (type == "int") {
    o.tag = LLAMA_KV_OVERRIDE_TYPE_INT;
    const auto v = parse_int(value);
    if (!v) throw not_a();
    o.val_i64 = *v;
  } else if (type == "float") {
    o.tag = LLAMA_KV_OVERRIDE_TYPE_FLOAT;
    const auto v = parse_double(value);
    if (!v) throw not_a();
    o.val_f64 = *v;
  } else if (type == "bool") {
    o.tag = LLAMA_KV_OVERRIDE_TYPE_BOOL;
    if (value != "true" && value != "false") throw fail("a bool is true or false");
    o.val_bool = value == "true";
  } else if (type == "str") {
    o.tag = LLAMA_KV_OVERRIDE_TYPE_STR;
    if (value.size() >= sizeof o.val_str) throw fail(fmt::format("a str is at most {} bytes", sizeof o.val_str - 1));
    std::memcpy(o.val_str, value.c_str(), value.size() + 1);
  } else {
    throw fail(fmt::format("unknown TYPE \"{}\"", type));
  }
  return o;
}

// The precision names tapdiff's tolerance profiles know, finest first.
constexpr std::array<std::string_view, 4> kPrecisionOrder = {"f32", "f16", "bf16", "q8"};

// The arithmetic llama.cpp's CPU backend applies to a matrix of this type: activations are
// converted to the weight's vec_dot type before the dot products.
std::string_view activation_precision(ggml_type weight) {
  const ggml_type dot = ggml_get_type_traits_cpu(weight)->vec_dot_type;
  if (dot == GGML_TYPE_F32) return "f32";
  if (dot == GGML_TYPE_F16) return "f16";
  if (dot == GGML_TYPE_BF16) return "bf16";
  return "q8";
}

std::string_view cache_precision(ggml_type cache) {
  if (cache == GGML_TYPE_F32) return "f32";
  if (cache == GGML_TYPE_F16) return "f16";
  if (cache == GGML_TYPE_BF16) return "bf16";
  return "q8";  // 4- and 5-bit caches too: attention replays round K and V as they store them
}

std::string_view coarser(std::string_view a, std::string_view b) {
  const auto rank = [](std::string_view p) { return std::find(kPrecisionOrder.begin(), kPrecisionOrder.end(), p); };
  return rank(a) >= rank(b) ? a : b;
}

NodeOp node_op(const ggml_tensor* t) {
  switch (t->op) {
    case GGML_OP_MUL_MAT: return NodeOp::mul_mat;
    case GGML_OP_ADD: return NodeOp::add;
    case GGML_OP_ROPE: return NodeOp::rope;
    case GGML_OP_RESHAPE: return NodeOp::reshape;
    case GGML_OP_GET_ROWS: return NodeOp::get_rows;
    default: return NodeOp::other;
  }
}

GraphNode graph_node(const ggml_tensor* t) {
  GraphNode n;
  n.name = t->name;
  n.op = node_op(t);
  if (t->src[0] != nullptr) n.src0 = t->src[0]->name;
  if (t->src[1] != nullptr) n.src1 = t->src[1]->name;
  return n;
}

// A node's elements as float32, in logical order (ne[0] fastest), whatever its strides and
// wherever its buffer lives.
std::vector<float> node_values(const ggml_tensor* t) {
  if (t->type != GGML_TYPE_F32 && t->type != GGML_TYPE_F16 && t->type != GGML_TYPE_BF16)
    throw std::runtime_error(fmt::format("llama.cpp node {} has type {}; tapdiff reads f32, f16 and bf16 nodes",
                                         t->name, ggml_type_name(t->type)));
  std::vector<std::uint8_t> copy;
  const auto* base = static_cast<const std::uint8_t*>(t->data);
  if (t->buffer == nullptr || !ggml_backend_buffer_is_host(t->buffer)) {
    copy.resize(ggml_nbytes(t));
    ggml_backend_tensor_get(t, copy.data(), 0, copy.size());
    base = copy.data();
  }
  std::vector<float> out(static_cast<std::size_t>(ggml_nelements(t)));
  std::size_t k = 0;
  for (std::int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (std::int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (std::int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (std::int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
          const std::uint8_t* p = base + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
          if (t->type == GGML_TYPE_F32) {
            std::memcpy(&out[k++], p, sizeof(float));
          } else if (t->type == GGML_TYPE_F16) {
            ggml_fp16_t h;
            std::memcpy(&h, p, sizeof h);
            out[k++] = ggml_fp16_to_fp32(h);
          } else {
            ggml_bf16_t h;
            std::memcpy(&h, p, sizeof h);
            out[k++] = ggml_bf16_to_fp32(h);
          }
        }
  return out;
}

// A node of int32 ids (ffn_moe_topk), in logical order.
std::vector<std::int32_t> node_ids(const ggml_tensor* t) {
  if (t->type != GGML_TYPE_I32)
    throw std::runtime_error(fmt::format("llama.cpp node {} has type {}; expected the i32 expert ids", t->name,
                                         ggml_type_name(t->type)));
  std::vector<std::uint8_t> copy(ggml_nbytes(t));
  ggml_backend_tensor_get(t, copy.data(), 0, copy.size());
  std::vector<std::int32_t> out;
  for (std::int64_t i2 = 0; i2 < t->ne[2]; ++i2)
    for (std::int64_t i1 = 0; i1 < t->ne[1]; ++i1)
      for (std::int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
        std::int32_t v;
        std::memcpy(&v, copy.data() + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2], sizeof v);
        out.push_back(v);
      }
  return out;
}

struct Captured {
  std::vector<float> rows;
  std::int64_t n_rows = 0;
  std::vector<std::int64_t> row_shape;
};

}  // namespace

struct LlamaRun::Impl {
  std::string model_path;
  LlamaOptions options;
  int n_ctx = 0;
  llama_model* model = nullptr;
  llama_context* ctx = nullptr;
  std::vector<llama_model_kv_override> overrides;  // llama.cpp reads them while loading
  std::string precision;
  std::string weight_types;  // "F32 x 12, Q4_K x 7"
  std::map<std::string, std::int64_t> rotations;  // attn_rot_k, attn_rot_v as llama.cpp logged them

  // The step in flight, for the eval callback.
  TraceWriter* trace = nullptr;
  TapDims dims;
  std::int64_t first_position = 0;
  std::int64_t n_tokens = 0;
  std::map<std::pair<std::string, int>, Captured> captured;  // last node of each tap wins
  std::map<int, std::vector<std::int32_t>> expert_ids;       // per layer: each token's experts, top-k order
  std::string callback_error;
  int layer_seen = -1;  // the last layer a node name carried (GraphNode::layer_hint)

  ~Impl() {
    if (ctx != nullptr) llama_free(ctx);
    if (model != nullptr) llama_model_free(model);
  }

  bool wanted(const std::optional<TapTarget>& target) const {
    return target && trace != nullptr &&
           trace->enabled(target->tap, target->layer, first_position, n_tokens);
  }

  // The scheduler asks (ask = true) whether to stop after a node, then calls again with its
  // data computed; the node's sources are still intact then.
  static bool on_node(ggml_tensor* t, bool ask, void* user) {
    auto* self = static_cast<Impl*>(user);
    GraphNode node = graph_node(t);
    node.layer_hint = self->layer_seen;
    if (const int layer = node_layer(node.name); layer >= 0) self->layer_seen = layer;
    const auto output = tap_for_node(node);
    const auto input = tap_for_input(node);
    const int ids_layer = expert_ids_layer(node);
    if (ask) return self->wanted(output) || self->wanted(input) || (ids_layer >= 0 && self->trace != nullptr);
    try {
      if (ids_layer >= 0 && self->trace != nullptr) self->expert_ids[ids_layer] = node_ids(t);
      if (self->wanted(output)) self->capture(*output, t);
      if (self->wanted(input)) self->capture(*input, t->src[1]);
    } catch (const std::exception& e) {
      if (self->callback_error.empty()) self->callback_error = e.what();
    }
    return true;  // keep computing; an error is raised after llama_decode returns
  }

  // The parts of a fused projection's rows (phi3): (tap, first element, width) each; none for a
  // node that holds one tap.
  std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> fused_parts(const TapTarget& target,
                                                                             std::int64_t width) const {
    const std::int64_t q = dims.n_head * dims.head_dim, kv = dims.n_head_kv * dims.head_dim, ff = dims.n_ff;
    if (target.layout == NodeLayout::fused_qkv) return {{"attn_q", 0, q}, {"attn_k", q, kv}, {"attn_v", q + kv, kv}};
    if (target.tap == "ffn_up" && width == 2 * ff) return {{"ffn_gate", 0, ff}, {"ffn_up", ff, ff}};
    return {};
  }

  void capture(const TapTarget& target, const ggml_tensor* t) {
    std::vector<float> values = node_values(t);
    const auto parts = fused_parts(target, n_tokens > 0 ? std::int64_t(values.size()) / n_tokens : 0);
    if (!parts.empty()) {
      const std::int64_t width = std::int64_t(values.size()) / n_tokens;
      for (const auto& [tap, first, part_width] : parts) {
        if (first + part_width > width)
          throw std::runtime_error(fmt::format("llama.cpp node {} has rows of {}, too narrow for its {}", t->name,
                                               width, tap));
        std::vector<float> part(std::size_t(n_tokens * part_width));
        for (std::int64_t i = 0; i < n_tokens; ++i)
          std::copy_n(values.begin() + std::ptrdiff_t(i * width + first), part_width,
                      part.begin() + std::ptrdiff_t(i * part_width));
        store(TapTarget{tap, target.layer}, t, std::move(part));
      }
      return;
    }
    store(target, t, std::move(values));
  }

  void store(const TapTarget& target, const ggml_tensor* t, std::vector<float> values) {
    const TapSpec* spec = find_tap_spec(target.tap);
    if (spec == nullptr) throw std::logic_error("node map names a tap outside the catalogue: " + target.tap);
    Captured c;
    c.row_shape = catalogue_row_shape(*spec, dims);
    std::int64_t row_len = 1;
    for (std::int64_t d : c.row_shape) row_len *= d;
    if (target.layout == NodeLayout::expert_rows || target.layout == NodeLayout::expert_weights) {
      values = in_expert_order(target, t, std::move(values));
      c.n_rows = n_tokens;
      c.rows = std::move(values);
    } else if (target.layout == NodeLayout::kq_softmax) {
      // ne = [n_kv, n_tokens, n_head]: cell j of the cache holds position j (one sequence in
      // an empty cache); keys past n_ctx are padding, masked to 0.
      const std::int64_t n_kv = t->ne[0], n = t->ne[1], n_head = t->ne[2] * t->ne[3];
      c.n_rows = n;
      c.rows.assign(static_cast<std::size_t>(n * row_len), 0.0f);
      const std::int64_t keys = std::min(n_kv, dims.n_ctx);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t h = 0; h < n_head; ++h)
          for (std::int64_t j = 0; j < keys; ++j)
            c.rows[std::size_t(i * row_len + h * dims.n_ctx + j)] = values[std::size_t(j + n_kv * (i + n * h))];
    } else {
      if (static_cast<std::int64_t>(values.size()) % row_len != 0)
        throw std::runtime_error(fmt::format("llama.cpp node {} has {} elements, not a whole number of {} rows of {}",
                                             t->name, values.size(), target.tap, row_len));
      c.n_rows = static_cast<std::int64_t>(values.size()) / row_len;
      c.rows = std::move(values);
    }
    if (c.n_rows != n_tokens)
      throw std::runtime_error(fmt::format("llama.cpp node {} holds {} rows of {}, the step has {} tokens", t->name,
                                           c.n_rows, target.tap, n_tokens));
    captured[{target.tap, target.layer}] = std::move(c);
  }

  // A node of each token's n_used experts in top-k order as the catalogue lays it out: rows in
  // ascending expert order, or the weights scattered to a dense [n_expert] row.
  std::vector<float> in_expert_order(const TapTarget& target, const ggml_tensor* t, std::vector<float> values) const {
    const auto ids = expert_ids.find(target.layer);
    const std::int64_t used = dims.n_expert_used, width = target.layout == NodeLayout::expert_rows ? dims.n_ff : 1;
    if (ids == expert_ids.end() || std::int64_t(ids->second.size()) != n_tokens * used ||
        std::int64_t(values.size()) != n_tokens * used * width)
      throw std::runtime_error(fmt::format("llama.cpp node {}: expected {} tokens' {} experts (of {} values each) "
                                           "after ffn_moe_topk-{}",
                                           t->name, n_tokens, used, width, target.layer));
    std::vector<float> out;
    for (std::int64_t i = 0; i < n_tokens; ++i) {
      const std::int32_t* chosen = ids->second.data() + i * used;
      const float* row = values.data() + i * used * width;
      if (target.layout == NodeLayout::expert_weights) {
        std::vector<float> dense(std::size_t(dims.n_expert), 0.0f);
        for (std::int64_t k = 0; k < used; ++k) dense.at(std::size_t(chosen[k])) = row[k];
        out.insert(out.end(), dense.begin(), dense.end());
        continue;
      }
      std::vector<std::int64_t> order(static_cast<std::size_t>(used));
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return chosen[a] < chosen[b]; });
      for (const std::int64_t k : order) out.insert(out.end(), row + k * width, row + (k + 1) * width);
    }
    return out;
  }

  // Writes what the step captured; logits_last: only the last row of `output`.
  void record_step(bool logits_last) {
    for (auto& [key, c] : captured) {
      const auto& [tap, layer] = key;
      std::int64_t first = first_position, rows = c.n_rows;
      const float* data = c.rows.data();
      if (tap == "output" && logits_last) {
        const std::int64_t row_len = static_cast<std::int64_t>(c.rows.size()) / c.n_rows;
        data += (rows - 1) * row_len;
        first += rows - 1;
        rows = 1;
      }
      if (trace->enabled(tap, layer, first, rows))
        trace->record(tap, layer, first, rows, RowShape(c.row_shape), data);
    }
    captured.clear();
    expert_ids.clear();
  }

  // One llama_decode of tokens at positions p0..; returns the greedy next token.
  int decode(const std::vector<int>& tokens, std::int64_t p0, bool logits_last) {
    llama_batch batch = llama_batch_init(static_cast<int>(tokens.size()), 0, 1);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      batch.token[i] = tokens[i];
      batch.pos[i] = static_cast<llama_pos>(p0 + std::int64_t(i));
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;  // every row: the last layer's taps keep every position
    }
    batch.n_tokens = static_cast<int>(tokens.size());
    first_position = p0;
    n_tokens = static_cast<std::int64_t>(tokens.size());
    const int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc != 0)
      throw std::runtime_error(fmt::format("llama_decode failed (code {}) at positions {}..{}: {}", rc, p0,
                                           p0 + n_tokens - 1, llama_log().tail()));
    if (!callback_error.empty()) throw std::runtime_error(callback_error);
    if (trace != nullptr) record_step(logits_last);
    const float* logits = llama_get_logits_ith(ctx, -1);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    return static_cast<int>(std::max_element(logits, logits + n_vocab) - logits);
  }
};

LlamaRun::LlamaRun(const std::string& model_path, const LlamaOptions& options, int n_ctx)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  LlamaLog& log = llama_log();
  s.model_path = model_path;
  s.options = options;
  s.n_ctx = n_ctx;
  if (options.threads < 0)
    throw std::invalid_argument(fmt::format("--threads: expected >= 0, got {}", options.threads));
  const ggml_type cache = parse_cache_type(options.kv_type);
  for (const std::string& o : options.overrides) s.overrides.push_back(parse_override(o));
  s.overrides.push_back(llama_model_kv_override{});  // the list ends with an empty key

  // Weight types and the precision, from the container tapdiff reads itself.
  const GgufFile file = GgufFile::open(model_path);
  std::map<std::string, int> types;
  std::string_view precision = cache_precision(cache);
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.ne.size() < 2) continue;
    std::string type = ggml_type_name(static_cast<ggml_type>(t.type));  // "q4_K": GGUF spells it Q4_K
    for (char& ch : type) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    ++types[type];
    precision = coarser(precision, activation_precision(static_cast<ggml_type>(t.type)));
  }
  for (const auto& [name, count] : types)
    s.weight_types += fmt::format("{}{} x {}", s.weight_types.empty() ? "" : ", ", name, count);
  s.precision = std::string(precision);

  llama_model_params mp = llama_model_default_params();
  mp.kv_overrides = s.overrides.size() > 1 ? s.overrides.data() : nullptr;
  log.take_overrides_applied();
  s.model = llama_model_load_from_file(model_path.c_str(), mp);
  if (s.model == nullptr) throw InputError(model_path, "llama.cpp", "llama.cpp could not load the model: " + log.tail());
  // An override llama.cpp never read changes nothing: a run that then agrees with the reference
  // would say the misconfiguration is harmless.
  const std::set<std::string> applied = log.take_overrides_applied();
  for (std::size_t i = 0; i + 1 < s.overrides.size(); ++i)
    if (applied.count(s.overrides[i].key) == 0)
      throw std::invalid_argument(fmt::format(
          "--llama-override {}: llama.cpp did not apply it: it reads no key \"{}\" for this model, or reads it as "
          "another TYPE ({}){}",
          options.overrides[i], s.overrides[i].key,
          file.find(s.overrides[i].key) != nullptr ? "the model has the key" : "the model has no such key",
          log.tail().empty() ? "" : "; llama.cpp said: " + log.tail()));

  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<std::uint32_t>(n_ctx);
  cp.n_batch = cp.n_ubatch = static_cast<std::uint32_t>(std::max(n_ctx, 1));
  cp.n_seq_max = 1;
  const int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cp.n_threads = cp.n_threads_batch = threads;
  cp.flash_attn_type = options.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cp.type_v = cache;
  cp.cb_eval = &Impl::on_node;
  cp.cb_eval_user_data = &s;
  cp.no_perf = true;
  log.take_rotations();
  s.ctx = llama_init_from_model(s.model, cp);
  s.rotations = log.take_rotations();
  if (s.ctx == nullptr)
    throw std::invalid_argument(fmt::format("llama.cpp refused the context (kv type {}, flash attention {}): {}",
                                            options.kv_type, options.flash_attn ? "on" : "off", log.tail()));
  s.options.threads = threads;
}

LlamaRun::~LlamaRun() = default;

void LlamaRun::describe(TraceMetadata& m) const {
  const Impl& s = *impl_;
  m.producer = Producer::llama_cpp;
  m.producer_version = fmt::format("llama.cpp {} (llama-cpp-python {})", TAPDIFF_LLAMA_VERSION, TAPDIFF_LLAMA_PY_VERSION);
  m.git_commit = TAPDIFF_LLAMA_COMMIT;
  m.precision = s.precision;
  std::string devices;
  for (std::size_t i = 0; i < ggml_backend_dev_count(); ++i) {
    ggml_backend_dev_t d = ggml_backend_dev_get(i);
    if (ggml_backend_dev_type(d) == GGML_BACKEND_DEVICE_TYPE_ACCEL) continue;
    devices += fmt::format("{}{}", devices.empty() ? "" : ",", ggml_backend_dev_name(d));
  }
  std::string overrides;
  for (const std::string& o : s.options.overrides) overrides += (overrides.empty() ? "" : ";") + o;
  m.settings = {{"backend", devices},
                {"kv_type", s.options.kv_type},
                {"flash_attn", std::int64_t(s.options.flash_attn)},
                {"threads", std::int64_t(s.options.threads)},
                {"weight_types", s.weight_types},
                {"kv_overrides", overrides},
                {"system_info", std::string(llama_print_system_info())}};
  for (const auto& [key, on] : s.rotations) m.settings[key] = on;  // absent where llama.cpp did not log it
  // The producer's hparams carry the architecture (app/trace_metadata_for.cpp fills them first).
  const auto arch = m.hparams.find("arch");
  const std::string* arch_name = arch == m.hparams.end() ? nullptr : std::get_if<std::string>(&arch->second);
  for (auto& [tap, why] : unavailable_taps(s.options.flash_attn, arch_name ? *arch_name : "llama"))
    m.unavailable[tap] = why;
}

std::vector<int> LlamaRun::generate(const std::vector<int>& prompt, int n_predict, const TapDims& dims,
                                    bool logits_all, TraceWriter* trace, const StepCallback& on_step) {
  Impl& s = *impl_;
  if (prompt.empty()) throw std::invalid_argument("tokens: expected at least one prompt token");
  const int total = static_cast<int>(prompt.size()) + n_predict;
  if (total > s.n_ctx)
    throw std::invalid_argument(fmt::format("the run needs {} positions, the context holds {}", total, s.n_ctx));
  s.trace = trace;
  s.dims = dims;
  llama_memory_clear(llama_get_memory(s.ctx), true);
  std::vector<int> tokens = prompt;
  int next = s.decode(prompt, 0, !logits_all);
  for (;;) {
    if (static_cast<int>(tokens.size()) < total) {
      tokens.push_back(next);
      if (trace) trace->append_token(next);
    }
    if (trace) trace->end_step();
    if (on_step) on_step(static_cast<int>(tokens.size()), total, tokens.back());
    if (static_cast<int>(tokens.size()) == total) return tokens;
    next = s.decode({tokens.back()}, static_cast<std::int64_t>(tokens.size()) - 1, true);
  }
}

}  // namespace tapdiff::adapters::llama_cpp
