# The README's two commands: `make demo` and `make test`. Both bootstrap what is missing first.
MAKEFLAGS += --no-print-directory
PRESET ?= $(if $(CI),ci,default)
BUILD  := build
JOBS   ?= $(shell nproc)
TAPDIFF := $(BUILD)/app/tapdiff

.PHONY: all bootstrap configure build test demo clean

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

demo: build
	@mkdir -p $(BUILD)/demo
	@$(TAPDIFF) fixture --arch llama --seed 7 -o $(BUILD)/demo/tiny-llama.gguf
	@$(TAPDIFF) inspect $(BUILD)/demo/tiny-llama.gguf

clean:
	rm -rf $(BUILD)
