// The CUDA executor (CUDA builds only): device 0, one stream, cuBLAS on that stream. Every
// launch is followed by a launch-error check; copies to the host synchronize the stream.
#pragma once

#include <memory>
#include <string>

#include "engine/device/stream.hpp"
#include "engine/executor.hpp"

namespace tapdiff::engine {

class CublasGemm;

class CudaExecutor final : public Executor {
public:
  CudaExecutor();  // throws EngineError naming the failed call
  ~CudaExecutor() override;
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  Backend backend() const override { return Backend::cuda; }
  std::string describe() const override { return description_; }
  bool host_visible() const override { return false; }
  ElemType weight_storage(ElemType precision) const override { return precision; }
  bool matvec_streams_f32() const override { return false; }

  Buffer allocate(std::size_t bytes) override;
  void upload(void* dst, const void* src, std::size_t bytes) override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  void synchronize() override;

protected:
  void launch(const DequantArgs& a) override { dequant_cuda(a, stream_); }
  void launch(const ConvertArgs& a) override { convert_cuda(a, stream_); }
  void launch(const RoundArgs& a) override { round_cuda(a, stream_); }
  void launch(const EmbedArgs& a) override { embed_cuda(a, stream_); }
  void launch(const RmsNormArgs& a) override { rmsnorm_cuda(a, stream_); }
  void launch(const BiasArgs& a) override { bias_cuda(a, stream_); }
  void launch(const RopeArgs& a) override { rope_cuda(a, stream_); }
  void launch(const KvAppendArgs& a) override { kv_append_cuda(a, stream_); }
  void launch(const AttentionArgs& a) override { attention_cuda(a, stream_); }
  void launch(const SiluMulArgs& a) override { silu_mul_cuda(a, stream_); }
  void launch(const AddArgs& a) override { add_cuda(a, stream_); }
  void launch(const MoeRouteArgs& a) override { moe_route_cuda(a, stream_); }
  void launch(const MoeSelectArgs& a) override { moe_select_cuda(a, stream_); }
  void launch(const MoeCombineArgs& a) override { moe_combine_cuda(a, stream_); }
  void launch(const CopyRowsArgs& a) override { copy_rows_cuda(a, stream_); }
  void launch(const SoftcapArgs& a) override { softcap_cuda(a, stream_); }
  void launch(const ScaleArgs& a) override { scale_cuda(a, stream_); }
  void launch(const ArgmaxArgs& a) override { argmax_cuda(a, stream_); }
  void launch(const GemmArgs& a) override;
  void launch(const MatvecArgs& a) override { matvec_cuda(a, stream_); }
  void launch(const QuantizeQ8Args& a) override { quantize_q8_cuda(a, stream_); }
  void launch(const MatmulQ8Args& a) override { matmul_q8_cuda(a, stream_); }

private:
  CudaStream stream_ = nullptr;
  std::unique_ptr<CublasGemm> gemm_;
  std::string description_;
};

}  // namespace tapdiff::engine
