#include "app/trace_metadata_for.hpp"

#include "app/git_commit.hpp"
#include "diff/replay_model.hpp"
#include "model/config.hpp"

namespace tapdiff {

TraceMetadata trace_metadata_for(const GgufFile& model, Producer producer, const std::string& precision,
                                 const std::string& fault, const std::vector<int>& prompt, int n_predict) {
  const ModelConfig c = load_model_config(model);
  TraceMetadata m;
  m.producer = producer;
  m.producer_version = TAPDIFF_VERSION;
  m.git_commit = git_commit();
  m.model_path = model.path();
  m.model_sha256 = model.sha256();
  m.hparams = diff::trace_hparams(c);
  m.precision = precision;
  m.fault = fault.empty() ? "none" : fault;
  m.prompt_length = static_cast<std::int64_t>(prompt.size());
  m.tokens.assign(prompt.begin(), prompt.end());
  TapDims dims;
  dims.n_layer = c.n_layer;
  dims.n_embd = c.n_embd;
  dims.n_head = c.n_head;
  dims.n_head_kv = c.n_head_kv;
  dims.head_dim = c.head_dim;
  dims.n_ff = c.n_ff;
  dims.n_expert = c.n_expert;
  dims.n_expert_used = c.n_expert_used;
  dims.n_vocab = c.n_vocab;
  dims.n_ctx = static_cast<std::int64_t>(prompt.size()) + n_predict;
  m.dims = dims;
  return m;
}

}  // namespace tapdiff
