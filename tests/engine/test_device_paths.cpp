// The CUDA executor's orchestration paths, run on this machine: an executor that keeps 16-bit
// weights in 16 bits (as the CUDA executor does for cublasGemmEx) and is not host-visible (so
// weights are uploaded, and taps copied and widened, as from a device), with host kernels.
// Its results must equal the host executor's bit for bit: the 16-bit weights widen to exactly
// the rounded float32 values the host executor multiplies. What this cannot cover (the .cu
// launchers and cuBLAS themselves) is test_engine_cuda's job.
#include <cstring>
#include <gtest/gtest.h>

#include "engine/forward.hpp"
#include "engine/host_kernels.hpp"
#include "engine/weights.hpp"
#include "engine_test_util.hpp"

namespace tapdiff::engine {
namespace {

using namespace test;

class DeviceLikeExecutor final : public HostKernels {
public:
  Backend backend() const override { return Backend::host; }
  std::string describe() const override { return "device-like host executor (test)"; }
  bool host_visible() const override { return false; }
  ElemType weight_storage(ElemType precision) const override { return precision; }
  bool matvec_streams_f32() const override { return false; }
  Buffer allocate(std::size_t bytes) override { return allocate_host(bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    ++uploads;
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    ++downloads;
    std::memcpy(dst, src, bytes);
  }
  void synchronize() override {}

  int uploads = 0, downloads = 0;

protected:
  using HostKernels::launch;
  // cublasGemmEx's contract on the host: a 16-bit A widened exactly, then float32 GEMM.
  void launch(const GemmArgs& a) override {
    if (a.a_type == ElemType::f32) return gemm_host(a);
    const std::int64_t a_cols = a.op_a == GemmOp::N ? a.k : a.m;
    const std::int64_t extent = std::int64_t(a.lda) * a_cols;
    widened_.resize(static_cast<std::size_t>(extent));
    convert_host(ConvertArgs{a.a, a.a_type, widened_.data(), ElemType::f32, extent});
    GemmArgs f32 = a;
    f32.a = widened_.data();
    f32.a_type = ElemType::f32;
    gemm_host(f32);
  }

private:
  std::vector<float> widened_;
};

TEST(DevicePaths, SixteenBitWeightStorageMatchesHostBitForBit) {
  for (Precision p : {Precision::f16, Precision::bf16})
    for (const FixtureSpec& spec : {llama_spec(GgmlType::Q4_0), qwen2_spec(GgmlType::F32)}) {
      const GgufFile model = fixture_file(spec);
      const std::vector<int> prompt = {1, 17, 42, 99, 7};
      EngineOptions o;
      o.n_predict = 8;
      o.precision = p;
      const TempTrace host_trace("host"), device_trace("device_like");
      std::vector<std::vector<float>> host_logits, device_logits;
      const auto host_tokens = run_engine(model, prompt, o, host_trace.path, &host_logits);

      DeviceLikeExecutor ex;
      TraceWriter trace(device_trace.path, engine_metadata(model, prompt, o));
      const auto device_tokens = generate_on(ex, model, prompt, o, &trace, &device_logits);
      trace.close();
      EXPECT_GT(ex.uploads, 0);
      EXPECT_GT(ex.downloads, 0);

      const std::string what =
          std::string(arch_name(spec.arch)) + " " + std::string(precision_name(p));
      EXPECT_EQ(device_tokens, host_tokens) << what;
      ASSERT_EQ(device_logits.size(), host_logits.size());
      for (std::size_t i = 0; i < host_logits.size(); ++i)
        EXPECT_EQ(0, std::memcmp(device_logits[i].data(), host_logits[i].data(),
                                 host_logits[i].size() * sizeof(float)))
            << what << " step " << i;
      for (const TapError& err : compare_traces(device_trace.path, host_trace.path))
        EXPECT_EQ(err.max_abs, 0.0) << what << " " << err.tap;
    }
}

}  // namespace
}  // namespace tapdiff::engine

namespace tapdiff::engine {
namespace {

// Weight taps read back from 16-bit device storage, and the loader faults that stage bytes
// through uploads, equal the host executor's bit for bit.
TEST(DevicePaths, WeightTapsAndLoaderFaultsMatchHostBitForBit) {
  for (const char* fault : {"", "dequant-missing", "tensor-bytes-truncated", "weight-not-wired"}) {
    const GgufFile model = fixture_file(llama_spec(GgmlType::Q8_0));
    const std::vector<int> prompt = {1, 17, 42};
    EngineOptions o;
    o.n_predict = 2;
    o.precision = Precision::f16;
    o.fault = fault;
    o.weights = WeightTapOptions{};
    const TempTrace host_trace("host_w"), device_trace("device_like_w");
    run_engine(model, prompt, o, host_trace.path);
    DeviceLikeExecutor ex;
    TraceWriter trace(device_trace.path, engine_metadata(model, prompt, o));
    generate_on(ex, model, prompt, o, &trace, nullptr);
    trace.close();
    const TraceReader host(host_trace.path), device(device_trace.path);
    EXPECT_NE(device.find("weight.blk.1.attn_v.weight", -1), nullptr);
    for (const TapInfo& t : host.taps()) {  // bitwise: dequant-missing leaves NaN in weights
      const TapRows h = host.read(t), d = device.read(device.tap(t.name, t.layer));
      ASSERT_EQ(h.values.size(), d.values.size()) << fault << " " << t.full_name;
      EXPECT_EQ(0, std::memcmp(h.values.data(), d.values.data(), h.values.size() * sizeof(float)))
          << fault << " " << t.full_name;
    }
  }
}

}  // namespace
}  // namespace tapdiff::engine

namespace tapdiff::engine {
namespace {

// A batched GEMM on a quantized weight decodes slices of its rows into the scratch: slices of a
// few rows (every projection in several, the last one short) give the product the whole matrix
// gives, row for row.
TEST(DevicePaths, ScratchSlicesGiveTheWholeMatrixProduct) {
  const GgufFile model = fixture_file(llama_spec(GgmlType::Q8_0));
  const ModelConfig c = load_model_config(model);
  auto ex = make_host_executor();
  const EngineWeights w = load_engine_weights(*ex, model, c, FaultSwitch{});
  const std::vector<int> prompt = {1, 17, 42, 99, 7, 3};
  const int n = int(prompt.size());
  Forward whole(*ex, w, c, n, n, Precision::f32, FaultSwitch{}, nullptr);
  Forward sliced(*ex, w, c, n, n, Precision::f32, FaultSwitch{}, nullptr, nullptr, false, 3 * c.n_embd);
  EXPECT_EQ(whole.step(prompt.data(), n, 0), sliced.step(prompt.data(), n, 0));
  const std::vector<float> want = whole.logits(), got = sliced.logits();
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::abs(v));
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << "logit " << i;
}

}  // namespace
}  // namespace tapdiff::engine
