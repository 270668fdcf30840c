// The C ABI over TraceWriter: exceptions become status codes plus a per-thread message.
#include "tapdiff/trace.h"

#include <cstring>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "tapdiff/trace_writer.hpp"

struct tapdiff_trace {
  tapdiff::TraceWriter writer;
  bool failed = false;
};

namespace {

thread_local std::string g_last_error;

tapdiff_status set_error(tapdiff_status status, std::string message) {
  g_last_error = std::move(message);
  return status;
}

// Runs fn, mapping exceptions to statuses. A TraceError is an argument problem when the
// writer is still usable afterwards, a trace (I/O) error when it failed in this call, and a
// state error when it had failed before.
template <class Fn>
tapdiff_status call(tapdiff_trace* trace, Fn&& fn) {
  try {
    fn();
    return TAPDIFF_OK;
  } catch (const tapdiff::TraceError& e) {
    if (trace == nullptr) return set_error(TAPDIFF_ERR_TRACE, e.what());
    if (trace->failed) return set_error(TAPDIFF_ERR_STATE, e.what());
    if (trace->writer.failed()) {
      trace->failed = true;
      return set_error(TAPDIFF_ERR_TRACE, e.what());
    }
    return set_error(TAPDIFF_ERR_ARGUMENT, e.what());
  } catch (const std::invalid_argument& e) {
    return set_error(TAPDIFF_ERR_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return set_error(TAPDIFF_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return set_error(TAPDIFF_ERR_INTERNAL, e.what());
  }
}

std::string text(const char* s, const char* fallback = "") { return s != nullptr ? s : fallback; }

tapdiff::TraceMetadata metadata_from(const tapdiff_trace_config& cfg) {
  tapdiff::TraceMetadata m;
  const std::string producer = text(cfg.producer, "external");
  const auto parsed = tapdiff::parse_producer(producer);
  if (!parsed) {
    throw std::invalid_argument(
        "producer: expected reference, engine-host, engine-cuda or "
        "external, got \"" +
        producer + "\"");
  }
  m.producer = *parsed;
  m.producer_version = text(cfg.producer_version);
  m.git_commit = text(cfg.git_commit);
  m.model_path = text(cfg.model_path);
  m.model_sha256 = text(cfg.model_sha256);
  m.precision = text(cfg.precision, "f32");
  m.fault = text(cfg.fault, "none");
  m.prompt_length = cfg.prompt_length;
  if (cfg.n_tokens > 0) {
    if (cfg.tokens == nullptr) throw std::invalid_argument("tokens is null but n_tokens > 0");
    m.tokens.assign(cfg.tokens, cfg.tokens + cfg.n_tokens);
  }
  if (cfg.n_hparams > 0 && cfg.hparams == nullptr) {
    throw std::invalid_argument("hparams is null but n_hparams > 0");
  }
  for (std::size_t i = 0; i < cfg.n_hparams; ++i) {
    const tapdiff_hparam& h = cfg.hparams[i];
    if (h.key == nullptr)
      throw std::invalid_argument("hparams[" + std::to_string(i) + "].key is null");
    switch (h.kind) {
      case TAPDIFF_HPARAM_INT:
        m.hparams[h.key] = h.int_value;
        break;
      case TAPDIFF_HPARAM_FLOAT:
        m.hparams[h.key] = h.float_value;
        break;
      case TAPDIFF_HPARAM_STRING:
        m.hparams[h.key] = text(h.string_value);
        break;
      default:
        throw std::invalid_argument(std::string("hparams '") + h.key + "': unknown kind");
    }
  }
  const tapdiff_dims& d = cfg.dims;
  const tapdiff::TapDims dims{d.n_layer,  d.n_embd, d.n_head,  d.n_head_kv,
                              d.head_dim, d.n_ff,   d.n_vocab, d.n_ctx};
  if (dims != tapdiff::TapDims{}) m.dims = dims;
  m.lockstep_source = text(cfg.lockstep_source);
  if (cfg.n_layouts > 0 && cfg.layouts == nullptr) throw std::invalid_argument("layouts is null but n_layouts > 0");
  for (std::size_t i = 0; i < cfg.n_layouts; ++i) {
    const tapdiff_layout& l = cfg.layouts[i];
    if (l.tap == nullptr || l.layout == nullptr)
      throw std::invalid_argument("layouts[" + std::to_string(i) + "]: tap or layout is null");
    try {
      m.layouts[l.tap] = tapdiff::TapLayout::parse(l.layout);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("layouts[\"" + std::string(l.tap) + "\"]: " + e.what());
    }
  }
  return m;
}

}  // namespace

extern "C" {

void tapdiff_trace_config_init(tapdiff_trace_config* cfg) {
  if (cfg == nullptr) return;
  std::memset(cfg, 0, sizeof *cfg);
  cfg->producer = "external";
  cfg->precision = "f32";
  cfg->fault = "none";
  cfg->commit_every = 1;
}

tapdiff_status tapdiff_trace_open(const char* path, const tapdiff_trace_config* cfg,
                                  tapdiff_trace** out) {
  if (out == nullptr) return set_error(TAPDIFF_ERR_ARGUMENT, "tapdiff_trace_open: out is null");
  *out = nullptr;
  if (path == nullptr || cfg == nullptr) {
    return set_error(TAPDIFF_ERR_ARGUMENT, "tapdiff_trace_open: path or cfg is null");
  }
  return call(nullptr, [&] {
    tapdiff::WriterOptions options;
    options.filter = tapdiff::TapFilter::parse(text(cfg->filter_names), text(cfg->filter_layers),
                                               text(cfg->filter_positions));
    options.commit_every = cfg->commit_every > 0 ? cfg->commit_every : 1;
    options.compress = cfg->compress != 0;
    options.fsync = cfg->fsync != 0;
    *out = new tapdiff_trace{tapdiff::TraceWriter(path, metadata_from(*cfg), std::move(options))};
  });
}

int tapdiff_trace_enabled(const tapdiff_trace* trace, const char* name, int layer,
                          int64_t position) {
  if (trace == nullptr || name == nullptr) return 0;
  return trace->writer.enabled(name, layer, position) ? 1 : 0;
}

int tapdiff_trace_enabled_range(const tapdiff_trace* trace, const char* name, int layer,
                                int64_t first_position, int64_t n_positions) {
  if (trace == nullptr || name == nullptr) return 0;
  return trace->writer.enabled(name, layer, first_position, n_positions) ? 1 : 0;
}

tapdiff_status tapdiff_trace_record(tapdiff_trace* trace, const char* name, int layer,
                                    int64_t first_position, int64_t n_rows,
                                    const int64_t* row_shape, int row_rank, const float* rows) {
  if (trace == nullptr || name == nullptr || row_shape == nullptr) {
    return set_error(TAPDIFF_ERR_ARGUMENT,
                     "tapdiff_trace_record: trace, name or row_shape is null");
  }
  if (row_rank < 1 || row_rank > tapdiff::RowShape::kMaxRank) {
    return set_error(TAPDIFF_ERR_ARGUMENT, "tapdiff_trace_record: " + std::string(name) +
                                               ": row_rank " + std::to_string(row_rank) +
                                               " is not in 1..4");
  }
  return call(trace, [&] {
    trace->writer.record(name, layer, first_position, n_rows,
                         tapdiff::RowShape(row_shape, row_rank), rows);
  });
}

tapdiff_status tapdiff_trace_append_tokens(tapdiff_trace* trace, const int32_t* tokens,
                                           size_t n_tokens) {
  if (trace == nullptr) return set_error(TAPDIFF_ERR_ARGUMENT, "tapdiff_trace_append_tokens: null");
  return call(trace, [&] { trace->writer.append_tokens(tokens, n_tokens); });
}

tapdiff_status tapdiff_trace_end_step(tapdiff_trace* trace) {
  if (trace == nullptr) return set_error(TAPDIFF_ERR_ARGUMENT, "tapdiff_trace_end_step: null");
  return call(trace, [&] { trace->writer.end_step(); });
}

tapdiff_status tapdiff_trace_close(tapdiff_trace* trace) {
  if (trace == nullptr) return set_error(TAPDIFF_ERR_ARGUMENT, "tapdiff_trace_close: null");
  tapdiff_status status = TAPDIFF_OK;
  try {
    trace->writer.close();
  } catch (const std::exception& e) {
    status = set_error(trace->failed ? TAPDIFF_ERR_STATE : TAPDIFF_ERR_TRACE, e.what());
  }
  delete trace;
  return status;
}

void tapdiff_trace_abandon(tapdiff_trace* trace) { delete trace; }

const char* tapdiff_last_error(void) { return g_last_error.c_str(); }

const char* tapdiff_status_name(tapdiff_status status) {
  switch (status) {
    case TAPDIFF_OK:
      return "ok";
    case TAPDIFF_ERR_ARGUMENT:
      return "invalid argument";
    case TAPDIFF_ERR_TRACE:
      return "trace error";
    case TAPDIFF_ERR_STATE:
      return "failed earlier";
    case TAPDIFF_ERR_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

}  // extern "C"
