// The host launchers of every op (bodies in OpenMP loops, GEMM through OpenBLAS), as a base
// for executors that run kernels on the host: the host executor, and the tests' device-like
// executor that changes only memory placement and the GEMM's operand types.
#pragma once

#include "engine/executor.hpp"

namespace tapdiff::engine {

class HostKernels : public Executor {
public:
  // One thread pool: OpenMP. GEMM slices call OpenBLAS single-threaded (gemm_host.cpp).
  HostKernels();

protected:
  void launch(const DequantArgs& a) override;
  void launch(const ConvertArgs& a) override;
  void launch(const RoundArgs& a) override;
  void launch(const EmbedArgs& a) override;
  void launch(const RmsNormArgs& a) override;
  void launch(const BiasArgs& a) override;
  void launch(const RopeArgs& a) override;
  void launch(const KvAppendArgs& a) override;
  void launch(const AttentionArgs& a) override;
  void launch(const SiluMulArgs& a) override;
  void launch(const AddArgs& a) override;
  void launch(const MoeRouteArgs& a) override;
  void launch(const MoeSelectArgs& a) override;
  void launch(const MoeCombineArgs& a) override;
  void launch(const CopyRowsArgs& a) override;
  void launch(const SoftcapArgs& a) override;
  void launch(const ScaleArgs& a) override;
  void launch(const ArgmaxArgs& a) override;
  void launch(const GemmArgs& a) override;
  void launch(const MatvecArgs& a) override;
  void launch(const EncodedGemmArgs& a) override;
  void launch(const QuantizeQ8Args& a) override;
  void launch(const MatmulQ8Args& a) override;
};

}  // namespace tapdiff::engine
