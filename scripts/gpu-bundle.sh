#!/usr/bin/env bash
# Packs the CUDA build for a GPU machine that has the NVIDIA driver and cuBLAS but none of
# tapdiff's build dependencies (HDF5, OpenBLAS, fmt, ...): tapdiff, test_engine_cuda and
# bench_engine (stripped) in bin/, the CUDA executor's module in lib/tapdiff/ (where bin/'s
# programs look for it), the shared libraries they load apart from the C runtime and cuBLAS,
# and bench/cuda_device.sh and bench/cuda_7b.sh behind wrappers. On the GPU machine:
#   tar -xzf tapdiff-gpu.tar.gz -C /tmp && /tmp/tapdiff-gpu/run.sh OUT_DIR
# runs the CUDA tests, the fault table, check --backend cuda and bench_engine, and writes the
# figures to OUT_DIR (docs/engine.md, "Benchmark"); /tmp/tapdiff-gpu/run-7b.sh OUT_DIR runs the
# 7B-shaped fixture on the GPU (about 6 minutes).
#
# Usage: scripts/gpu-bundle.sh [BUILD_DIR] [ARCHIVE]   (default: build, BUILD_DIR/tapdiff-gpu.tar.gz)
# Exit codes: 0 written; 2 BUILD_DIR holds no CUDA build.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$repo/build}"
archive="$(realpath -m "${2:-$build/tapdiff-gpu.tar.gz}")"
programs=(app/tapdiff tests/engine/test_engine_cuda bench/bench_engine)
module=engine/libtapdiff_cuda.so
for p in "${programs[@]}" "$module"; do
  [ -x "$build/$p" ] || { echo "gpu-bundle.sh: $build/$p is missing: build with nvcc present first (make build)" >&2; exit 2; }
done

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
dir="$stage/tapdiff-gpu"
mkdir -p "$dir/bin" "$dir/lib/tapdiff"
for p in "${programs[@]}"; do strip -o "$dir/bin/$(basename "$p")" "$build/$p"; done
strip --strip-unneeded -o "$dir/lib/tapdiff/$(basename "$module")" "$build/$module"
# The C runtime and cuBLAS stay the GPU machine's own: its C library is the one its kernel and
# driver go with, and its cuBLAS matches its driver. The CUDA runtime travels (it is small and
# works with any driver as new as the toolkit's).
ldd "$dir"/bin/* "$dir/lib/tapdiff"/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+|libcublas|libcublasLt)\.so' |
  xargs -r cp -L -t "$dir/lib"
cp "$repo/bench/cuda_device.sh" "$repo/bench/cuda_7b.sh" "$dir/"
cat >"$dir/env.sh" <<'ENV'
# Sourced by run.sh and run-7b.sh: this bundle's libraries first, then the machine's cuBLAS.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cublas="$(ldconfig -p 2>/dev/null | awk '/libcublasLt\.so\.13 /{print $NF; exit}')"
[ -n "$cublas" ] || cublas="$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)"
export LD_LIBRARY_PATH="$here/lib${cublas:+:$(dirname "$cublas")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TAPDIFF="$here/bin/tapdiff" TEST_ENGINE_CUDA="$here/bin/test_engine_cuda" BENCH_ENGINE="$here/bin/bench_engine"
ENV
runner() {  # runner NAME SCRIPT: NAME runs SCRIPT on this bundle's programs
  cat >"$dir/$1" <<RUN
#!/usr/bin/env bash
# Runs $2 on this bundle's programs: $1 [OUT_DIR] (default: ./results here).
set -uo pipefail
source "\$(dirname "\$0")/env.sh"
exec "\$here/$2" "\$here" "\${1:-\$here/results}"
RUN
}
runner run.sh cuda_device.sh
runner run-7b.sh cuda_7b.sh
chmod +x "$dir/run.sh" "$dir/run-7b.sh" "$dir/cuda_device.sh" "$dir/cuda_7b.sh"
mkdir -p "$(dirname "$archive")"
tar -C "$stage" -czf "$archive" tapdiff-gpu
echo "wrote $archive ($(du -h "$archive" | cut -f1)): tar -xzf it on the GPU machine, then tapdiff-gpu/run.sh OUT_DIR"
