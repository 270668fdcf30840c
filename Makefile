# The README's two commands: `make demo` and `make test`. Both bootstrap what is missing first.
MAKEFLAGS += --no-print-directory
PRESET ?= $(if $(CI),ci,default)
BUILD  := build
JOBS   ?= $(shell nproc)
# Idle OpenMP threads sleep instead of spinning: on a shared 2-core machine spinning threads of
# parallel test processes starve each other (the host engine runs 4-6x slower).
export OMP_WAIT_POLICY ?= passive
TAPDIFF := $(BUILD)/app/tapdiff

.PHONY: all bootstrap configure build test demo bench clean

all: build

bootstrap:
	@scripts/bootstrap.sh

configure: bootstrap
	@mkdir -p $(BUILD)
	@cmake --preset $(PRESET) >$(BUILD)/configure.log 2>&1 || { cat $(BUILD)/configure.log; exit 1; }

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

test: build
	@ctest --preset $(PRESET) -j $(JOBS)

demo: configure
	@echo "building tapdiff (log: $(BUILD)/build.log) ..."
	@cmake --build --preset $(PRESET) -j $(JOBS) >$(BUILD)/build.log 2>&1 || { cat $(BUILD)/build.log; exit 1; }
	@$(TAPDIFF) demo --out $(BUILD)/demo

# Benchmarks write their figures to bench/results/ (never timed tests). A few minutes. They
# run with spinning OpenMP threads (active), the fastest policy on an otherwise idle machine.
bench: build
	@mkdir -p bench/results
	@OMP_WAIT_POLICY=active $(BUILD)/bench/bench_reference -o bench/results/reference.md
	@OMP_WAIT_POLICY=active $(BUILD)/bench/bench_engine --threads 2 --out bench/results/engine.md
	@$(BUILD)/bench/bench_tracer -o bench/results/tracer.md --json bench/results/tracer.json
	@$(BUILD)/venv/bin/python bench/calibrate_tolerances.py --tapdiff $(TAPDIFF)

clean:
	rm -rf $(BUILD)
