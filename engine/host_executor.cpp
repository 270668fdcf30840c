// The host executor: op bodies in OpenMP loops, GEMM through OpenBLAS, memory in aligned
// host allocations.
#include <cblas.h>
#include <cstring>
#include <fmt/format.h>
#include <omp.h>

#include "engine/executor.hpp"

namespace tapdiff::engine {
namespace {

class HostExecutor final : public Executor {
public:
  // One thread pool: OpenMP. GEMM slices call OpenBLAS single-threaded (gemm_host.cpp).
  HostExecutor() { openblas_set_num_threads(1); }

  Backend backend() const override { return Backend::host; }
  std::string describe() const override {
    return fmt::format("host executor ({} OpenMP threads; GEMM: OpenBLAS per thread)",
                       omp_get_max_threads());
  }
  bool host_visible() const override { return true; }
  ElemType weight_storage(ElemType) const override { return ElemType::f32; }

  Buffer allocate(std::size_t bytes) override { return allocate_host(bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

protected:
  void launch(const DequantArgs& a) override { dequant_host(a); }
  void launch(const ConvertArgs& a) override { convert_host(a); }
  void launch(const RoundArgs& a) override { round_host(a); }
  void launch(const EmbedArgs& a) override { embed_host(a); }
  void launch(const RmsNormArgs& a) override { rmsnorm_host(a); }
  void launch(const BiasArgs& a) override { bias_host(a); }
  void launch(const RopeArgs& a) override { rope_host(a); }
  void launch(const KvAppendArgs& a) override { kv_append_host(a); }
  void launch(const AttentionArgs& a) override { attention_host(a); }
  void launch(const SiluMulArgs& a) override { silu_mul_host(a); }
  void launch(const AddArgs& a) override { add_host(a); }
  void launch(const ArgmaxArgs& a) override { argmax_host(a); }
  void launch(const GemmArgs& a) override { gemm_host(a); }
};

}  // namespace

std::unique_ptr<Executor> make_host_executor() { return std::make_unique<HostExecutor>(); }

}  // namespace tapdiff::engine
