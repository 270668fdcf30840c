// The backend switch. An Executor owns memory and runs ops; the host executor runs each op's
// body in OpenMP loops and GEMMs through OpenBLAS, the CUDA executor launches the same bodies
// as grid-stride kernels and GEMMs through cuBLAS. Orchestration (forward.cpp) only talks to
// this interface, so one code path drives both.
//
// Each op has three layers (ggml-cuda style): the body (kernels/<op>.hpp), a launcher per
// executor (<op>_host.cpp, <op>.cu), and the checked entry here, which validates the
// arguments before launching.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>

#include "engine/device/buffer.hpp"
#include "engine/device/elem_type.hpp"
#include "engine/gemm/gemm.hpp"
#include "engine/kernels/add.hpp"
#include "engine/kernels/scale.hpp"
#include "engine/kernels/softcap.hpp"
#include "engine/kernels/argmax.hpp"
#include "engine/kernels/attention.hpp"
#include "engine/kernels/bias.hpp"
#include "engine/kernels/convert.hpp"
#include "engine/kernels/copy_rows.hpp"
#include "engine/kernels/dequant.hpp"
#include "engine/kernels/embed.hpp"
#include "engine/kernels/kv_append.hpp"
#include "engine/kernels/matmul_q8.hpp"
#include "engine/kernels/matmul_q8k.hpp"
#include "engine/kernels/matvec.hpp"
#include "engine/kernels/moe_combine.hpp"
#include "engine/kernels/moe_route.hpp"
#include "engine/kernels/quantize_q8.hpp"
#include "engine/kernels/rmsnorm.hpp"
#include "engine/kernels/rope.hpp"
#include "engine/kernels/round.hpp"
#include "engine/kernels/silu_mul.hpp"
#include "engine/options.hpp"

namespace tapdiff::engine {

class Executor {
public:
  virtual ~Executor() = default;

  virtual Backend backend() const = 0;
  virtual std::string describe() const = 0;  // for logs and bench reports
  // True when buffers are ordinary host memory (taps then read them in place).
  virtual bool host_visible() const = 0;
  // How weight matrices (and the embedding table) are stored under a precision: the CUDA
  // executor keeps 16-bit weights in 16 bits for cublasGemmEx; OpenBLAS needs float32, so the
  // host executor keeps the 16-bit values in float32.
  virtual ElemType weight_storage(ElemType precision) const = 0;
  // Whether a decode step multiplies a float32 matrix at f32 precision with matvec rather than
  // the GEMM: where the host's AVX-512 matvec streams float32 faster than OpenBLAS's dot
  // products (docs/engine.md, "Weights in their encoding"); cuBLAS's own GEMV otherwise.
  virtual bool matvec_streams_f32() const = 0;
  // Whether gemm_encoded multiplies a weight of this encoding, at every precision: the host's
  // AVX-512 tiles, which round each weight to the precision as they decode it (gemm_tiles.hpp).
  // Elsewhere Forward decodes slices of the weight into a scratch matrix and multiplies each
  // with gemm, as llama.cpp's CUDA backend does.
  virtual bool gemm_decodes(const Encoded&) const { return false; }

  // Memory. Buffers come zero-filled. upload/download copy bytes between host memory and a
  // buffer of this executor; download returns once the data is on the host.
  virtual Buffer allocate(std::size_t bytes) = 0;
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void synchronize() = 0;

  // Checked entries.
  void dequantize(const DequantArgs& a) {
    validate(a);
    launch(a);
  }
  void convert(const ConvertArgs& a) {
    validate(a);
    launch(a);
  }
  void round(const RoundArgs& a) {
    validate(a);
    launch(a);
  }
  void embed(const EmbedArgs& a) {
    validate(a);
    launch(a);
  }
  void rmsnorm(const RmsNormArgs& a) {
    validate(a);
    launch(a);
  }
  void add_bias(const BiasArgs& a) {
    validate(a);
    launch(a);
  }
  void rope(const RopeArgs& a) {
    validate(a);
    launch(a);
  }
  void kv_append(const KvAppendArgs& a) {
    validate(a);
    launch(a);
  }
  void attention(const AttentionArgs& a) {
    validate(a);
    launch(a);
  }
  void silu_mul(const SiluMulArgs& a) {
    validate(a);
    launch(a);
  }
  void add(const AddArgs& a) {
    validate(a);
    launch(a);
  }
  void moe_route(const MoeRouteArgs& a) {
    validate(a);
    launch(a);
  }
  void moe_select(const MoeSelectArgs& a) {
    validate(a);
    launch(a);
  }
  void moe_combine(const MoeCombineArgs& a) {
    validate(a);
    launch(a);
  }
  void copy_rows(const CopyRowsArgs& a) {
    validate(a);
    launch(a);
  }
  void softcap(const SoftcapArgs& a) {
    validate(a);
    launch(a);
  }
  void scale(const ScaleArgs& a) {
    validate(a);
    launch(a);
  }
  void argmax(const ArgmaxArgs& a) {
    validate(a);
    launch(a);
  }
  void gemm(const GemmArgs& a) {
    validate(a);
    launch(a);
  }
  void gemm_encoded(const EncodedGemmArgs& a) {
    validate(a);
    launch(a);
  }
  void matvec(const MatvecArgs& a) {
    validate(a);
    launch(a);
  }
  void quantize_q8(const QuantizeQ8Args& a) {
    validate(a);
    launch(a);
  }
  void matmul_q8(const MatmulQ8Args& a) {
    validate(a);
    launch(a);
  }

protected:
  // Launchers: one per op, same signature on both executors.
  virtual void launch(const DequantArgs& a) = 0;
  virtual void launch(const ConvertArgs& a) = 0;
  virtual void launch(const RoundArgs& a) = 0;
  virtual void launch(const EmbedArgs& a) = 0;
  virtual void launch(const RmsNormArgs& a) = 0;
  virtual void launch(const BiasArgs& a) = 0;
  virtual void launch(const RopeArgs& a) = 0;
  virtual void launch(const KvAppendArgs& a) = 0;
  virtual void launch(const AttentionArgs& a) = 0;
  virtual void launch(const SiluMulArgs& a) = 0;
  virtual void launch(const AddArgs& a) = 0;
  virtual void launch(const MoeRouteArgs& a) = 0;
  virtual void launch(const MoeSelectArgs& a) = 0;
  virtual void launch(const MoeCombineArgs& a) = 0;
  virtual void launch(const CopyRowsArgs& a) = 0;
  virtual void launch(const SoftcapArgs& a) = 0;
  virtual void launch(const ScaleArgs& a) = 0;
  virtual void launch(const ArgmaxArgs& a) = 0;
  virtual void launch(const GemmArgs& a) = 0;
  virtual void launch(const MatvecArgs& a) = 0;
  // Only where gemm_decodes says so: the others' default refuses. Inline, as is every member,
  // so that the CUDA module builds this interface from the header alone.
  virtual void launch(const EncodedGemmArgs&) {
    throw std::logic_error("gemm_encoded: " + describe() + " multiplies decoded slices (gemm_decodes is false)");
  }
  virtual void launch(const QuantizeQ8Args& a) = 0;
  virtual void launch(const MatmulQ8Args& a) = 0;
};

std::unique_ptr<Executor> make_host_executor();
// Throws NoDeviceError (with the reason) for cuda when no device can be used.
std::unique_ptr<Executor> make_executor(Backend backend);

}  // namespace tapdiff::engine
