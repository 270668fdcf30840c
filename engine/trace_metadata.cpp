#include "engine/trace_metadata.hpp"

#include "engine/faults.hpp"
#include "model/config.hpp"
#include "model/sha256.hpp"

namespace tapdiff::engine {

TraceMetadata engine_trace_metadata(const GgufFile& model, const std::vector<int>& prompt,
                                    const EngineOptions& o) {
  const ModelConfig c = load_model_config(model);
  TraceMetadata m;
  m.producer = o.backend == Backend::cuda ? Producer::engine_cuda : Producer::engine_host;
  m.producer_version = TAPDIFF_ENGINE_VERSION;
  m.git_commit = TAPDIFF_ENGINE_GIT_COMMIT;
  m.model_path = model.path();
  m.model_sha256 = sha256_hex(model.bytes(), static_cast<std::size_t>(model.file_size()));
  m.hparams = {{"arch", arch_name(c.arch)},
               {"n_layer", std::int64_t(c.n_layer)},
               {"n_embd", std::int64_t(c.n_embd)},
               {"n_head", std::int64_t(c.n_head)},
               {"n_head_kv", std::int64_t(c.n_head_kv)},
               {"head_dim", std::int64_t(c.head_dim)},
               {"n_ff", std::int64_t(c.n_ff)},
               {"n_vocab", std::int64_t(c.n_vocab)},
               {"n_rot", std::int64_t(c.n_rot)},
               {"rope_freq_base", double(c.rope_freq_base)},
               {"rope_pairing", rope_pairing_name(c.rope_pairing)},
               {"rms_eps", double(c.rms_eps)}};
  m.precision = std::string(precision_name(o.precision));
  const Fault fault = parse_fault(o.fault);
  m.fault = fault == Fault::none ? "none" : std::string(fault_spec(fault).name);
  m.prompt_length = static_cast<std::int64_t>(prompt.size());
  m.tokens.assign(prompt.begin(), prompt.end());
  TapDims d;
  d.n_layer = c.n_layer;
  d.n_embd = c.n_embd;
  d.n_head = c.n_head;
  d.n_head_kv = c.n_head_kv;
  d.head_dim = c.head_dim;
  d.n_ff = c.n_ff;
  d.n_vocab = c.n_vocab;
  d.n_ctx = static_cast<std::int64_t>(prompt.size()) + o.n_predict;
  m.dims = d;
  return m;
}

}  // namespace tapdiff::engine
