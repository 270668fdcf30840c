// The host executor: op bodies in OpenMP loops, GEMM through OpenBLAS, memory in aligned
// host allocations.
#include <cblas.h>
#include <dlfcn.h>
#include <cstring>
#include <fmt/format.h>
#include <omp.h>

#include "engine/gemm/gemm_tiles.hpp"
#include "engine/host_kernels.hpp"
#include "engine/kernels/matvec_avx512.hpp"

namespace tapdiff::engine {

// OpenBLAS runs single-threaded inside OpenMP's slices. A pthread build of it also starts a
// pool of its own at load, whose threads spin for work for the first ~0.15 s of every process
// on the cores OpenMP needs: the pool is ended where the library has one to end.
HostKernels::HostKernels() {
  openblas_set_num_threads(1);
  using Shutdown = int (*)();
  if (const auto shutdown = reinterpret_cast<Shutdown>(::dlsym(RTLD_DEFAULT, "blas_thread_shutdown_")))
    shutdown();
}

void HostKernels::launch(const DequantArgs& a) { dequant_host(a); }
void HostKernels::launch(const ConvertArgs& a) { convert_host(a); }
void HostKernels::launch(const RoundArgs& a) { round_host(a); }
void HostKernels::launch(const EmbedArgs& a) { embed_host(a); }
void HostKernels::launch(const RmsNormArgs& a) { rmsnorm_host(a); }
void HostKernels::launch(const BiasArgs& a) { bias_host(a); }
void HostKernels::launch(const RopeArgs& a) { rope_host(a); }
void HostKernels::launch(const KvAppendArgs& a) { kv_append_host(a); }
void HostKernels::launch(const AttentionArgs& a) { attention_host(a); }
void HostKernels::launch(const SiluMulArgs& a) { silu_mul_host(a); }
void HostKernels::launch(const AddArgs& a) { add_host(a); }
void HostKernels::launch(const MoeRouteArgs& a) { moe_route_host(a); }
void HostKernels::launch(const MoeSelectArgs& a) { moe_select_host(a); }
void HostKernels::launch(const MoeCombineArgs& a) { moe_combine_host(a); }
void HostKernels::launch(const CopyRowsArgs& a) { copy_rows_host(a); }
void HostKernels::launch(const SoftcapArgs& a) { softcap_host(a); }
void HostKernels::launch(const ScaleArgs& a) { scale_host(a); }
void HostKernels::launch(const ArgmaxArgs& a) { argmax_host(a); }
void HostKernels::launch(const GemmArgs& a) { gemm_host(a); }
void HostKernels::launch(const MatvecArgs& a) { matvec_host(a); }
void HostKernels::launch(const EncodedGemmArgs& a) { gemm_encoded_host(a); }
void HostKernels::launch(const QuantizeQ8Args& a) { quantize_q8_host(a); }
void HostKernels::launch(const MatmulQ8Args& a) { matmul_q8_host(a); }

namespace {

class HostExecutor final : public HostKernels {
public:
  Backend backend() const override { return Backend::host; }
  std::string describe() const override {
    return fmt::format("host executor ({} OpenMP threads; GEMM: OpenBLAS per thread)",
                       omp_get_max_threads());
  }
  bool host_visible() const override { return true; }
  ElemType weight_storage(ElemType) const override { return ElemType::f32; }
  bool matvec_streams_f32() const override { return matvec_avx512_applies(MatvecArgs{}); }
  bool gemm_decodes(const Encoded& w) const override { return gemm_tiles_decode(w); }

  Buffer allocate(std::size_t bytes) override { return allocate_host(bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<Executor> make_host_executor() { return std::make_unique<HostExecutor>(); }

}  // namespace tapdiff::engine
