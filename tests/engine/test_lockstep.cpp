// Lockstep: at every tap point the engine records its own value, then continues from the source
// trace's. A fault still shows in its own op's tap, and nothing downstream of it does.
#include <cstring>
#include <gtest/gtest.h>

#include "engine/host_kernels.hpp"
#include "engine/taps.hpp"
#include "engine_test_util.hpp"
#include "model/error.hpp"

namespace tapdiff::engine {
namespace {

using namespace test;

const std::vector<int> kPrompt = {1, 17, 42, 99};
constexpr int kPredict = 4;

// Host kernels on memory treated as a device's: taps are downloaded, lockstep rows uploaded
// (the CUDA executor's host-to-device copy into the op's output buffer).
class DeviceLikeMemory final : public HostKernels {
public:
  Backend backend() const override { return Backend::host; }
  std::string describe() const override { return "device-like memory (test)"; }
  bool host_visible() const override { return false; }
  ElemType weight_storage(ElemType) const override { return ElemType::f32; }
  bool matvec_streams_f32() const override { return false; }
  Buffer allocate(std::size_t bytes) override { return allocate_host(bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    ++uploads;
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void synchronize() override {}

  int uploads = 0;
};

double max_abs_diff(const TraceReader& a, const TraceReader& b, const std::string& name, int layer) {
  const TapRows ra = a.read(a.tap(name, layer)), rb = b.read(b.tap(name, layer));
  EXPECT_EQ(ra.positions, rb.positions) << name;
  double worst = 0;
  for (std::size_t i = 0; i < std::min(ra.values.size(), rb.values.size()); ++i)
    worst = std::max(worst, std::abs(double(ra.values[i]) - double(rb.values[i])));
  return worst;
}

struct LockstepRun {
  TempTrace reference{"lockstep_reference"};
  TempTrace engine{"lockstep_engine"};
  std::vector<int> tokens;
};

// The reference's trace, then the engine in lockstep with it under `fault` on `ex` (null: the
// host executor).
void run_lockstep(const GgufFile& model, const std::string& fault, Precision precision, LockstepRun& run,
                  Executor* ex = nullptr) {
  const std::vector<int> ref_tokens = run_reference(model, kPrompt, kPredict, run.reference.path);
  EngineOptions o;
  o.n_predict = kPredict;
  o.precision = precision;
  o.fault = fault;
  o.lockstep = run.reference.path;
  EngineOptions clean = o;
  clean.fault.clear();  // engine_metadata names one fault; the trace records the list as given
  TraceMetadata m = engine_metadata(model, kPrompt, clean);
  m.fault = fault;
  m.lockstep_source = run.reference.path;
  TraceWriter trace(run.engine.path, m);
  run.tokens = ex ? generate_on(*ex, model, kPrompt, o, &trace, nullptr) : generate(model, kPrompt, o, &trace);
  trace.close();
  // The injected logits make the engine choose the reference's tokens.
  EXPECT_EQ(run.tokens, ref_tokens);
}

TEST(Lockstep, AFaultShowsOnlyInItsOwnOp) {
  const GgufFile model = fixture_file(qwen2_spec());
  LockstepRun run;
  run_lockstep(model, "bias-dropped", Precision::f32, run);
  const TraceReader ref(run.reference.path), eng(run.engine.path);
  for (int layer = 0; layer < 2; ++layer) {
    // The projection the fault breaks records its own (biasless) value ...
    EXPECT_GT(max_abs_diff(ref, eng, "attn_q", layer), 1e-3) << layer;
    EXPECT_GT(max_abs_diff(ref, eng, "attn_v", layer), 1e-3) << layer;
    // ... and every op after it ran on the reference's values.
    for (const char* next : {"attn_q.rope", "kv.v", "attn.out", "resid.ffn"})
      EXPECT_LT(max_abs_diff(ref, eng, next, layer), 1e-5) << next << " " << layer;
  }
  EXPECT_LT(max_abs_diff(ref, eng, "output", -1), 1e-4);
}

TEST(Lockstep, TwoFaultsEachInTheirOwnOp) {
  const GgufFile model = fixture_file(llama_spec());
  LockstepRun run;
  run_lockstep(model, "rope-wrong-pairing,weights-transposed", Precision::f32, run);
  const TraceReader ref(run.reference.path), eng(run.engine.path);
  EXPECT_LT(max_abs_diff(ref, eng, "attn_q", 0), 1e-5);
  EXPECT_GT(max_abs_diff(ref, eng, "attn_q.rope", 0), 1e-3);
  EXPECT_LT(max_abs_diff(ref, eng, "attn.out", 0), 1e-5);
  EXPECT_GT(max_abs_diff(ref, eng, "attn_output", 0), 1e-3);
  EXPECT_LT(max_abs_diff(ref, eng, "resid.attn", 0), 1e-5);
}

// f16: the KV cache holds 16-bit rows, so kv.k/kv.v injection narrows the source's rows; on
// device-like memory every injection is an upload.
TEST(Lockstep, SixteenBitCacheOnDeviceLikeMemory) {
  const GgufFile model = fixture_file(llama_spec());
  LockstepRun run;
  DeviceLikeMemory ex;
  run_lockstep(model, "kv-not-written-decode", Precision::f16, run, &ex);
  EXPECT_GT(ex.uploads, 100);
  const TraceReader ref(run.reference.path), eng(run.engine.path);
  // Decode steps never wrote their K row: the read-back slot holds zeros there ...
  const TapRows k = eng.read(eng.tap("kv.k", 0), kPrompt.size(), kPrompt.size());
  ASSERT_EQ(k.size(), 1u);
  for (std::int64_t i = 0; i < k.row_size; ++i) ASSERT_EQ(k.row(0)[i], 0.0f) << i;
  // ... then lockstep filled the slot with the reference's row, so attention saw it.
  const TapRows out_ref = ref.read(ref.tap("attn.out", 0)), out = eng.read(eng.tap("attn.out", 0));
  ASSERT_EQ(out.values.size(), out_ref.values.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    worst = std::max(worst, std::abs(double(out.values[i]) - out_ref.values[i]));
    scale = std::max(scale, std::abs(double(out_ref.values[i])));
  }
  EXPECT_LT(worst, 4e-3 * scale);  // f16 rounding of the cache and of attention's inputs
}

TEST(Lockstep, SourceRowsAreCheckedAgainstTheOp) {
  const GgufFile model = fixture_file(llama_spec());
  const TempTrace reference("lockstep_partial");
  run_reference(model, kPrompt, 1, reference.path);
  const LockstepSource source(reference.path);
  const auto rows = source.rows("attn_q", 0, 0, 4, 64);
  EXPECT_EQ(rows.size(), 4u * 64u);
  // Another width (a shape bug): nothing to inject.
  EXPECT_TRUE(source.rows("attn_q", 0, 0, 4, 32).empty());
  // Positions the source lacks, a tap it lacks: an input error naming the file and the tap.
  try {
    source.rows("attn_q", 0, 2, 8, 64);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(reference.path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/taps/attn_q: layer 0: expected positions 2..9"),
              std::string::npos)
        << e.what();
  }
  try {
    source.rows("attn_q", 7, 0, 1, 64);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/taps/attn_q: layer 7: lockstep needs every tap"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tapdiff::engine
