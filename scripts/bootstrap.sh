#!/usr/bin/env bash
# Installs what tapdiff needs and is missing: Debian packages (apt-get) and the test Python
# (a venv under build/venv filled from PyPI). Idempotent and quiet when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
  cmake make g++ pkg-config git
  libhdf5-dev hdf5-tools
  libcli11-dev libfmt-dev nlohmann-json3-dev
  libopenblas-dev
  libgtest-dev libgmock-dev
  clang libclang-rt-14-dev
  python3 python3-venv
  chromium
)
VENV=build/venv
PYTHON_REQUIREMENTS=scripts/requirements-test.txt
LLAMA_REQUIREMENTS=scripts/requirements-llama.txt
TRANSFORMERS_REQUIREMENTS=scripts/requirements-transformers.txt

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else echo "bootstrap: need root to run: $*" >&2; exit 1; fi
}

missing=()
for pkg in "${DEBIAN_PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The venv's stamp records the requirements it was filled from; refill when they change.
stamp="$VENV/.requirements"
if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating the test Python in $VENV"
  mkdir -p build
  python3 -m venv "$VENV" 2>/dev/null || /usr/bin/python3 -m venv "$VENV"
fi
if ! cmp -s "$PYTHON_REQUIREMENTS" "$stamp"; then
  echo "bootstrap: installing Python test packages from $PYTHON_REQUIREMENTS"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$PYTHON_REQUIREMENTS"
  cp "$PYTHON_REQUIREMENTS" "$stamp"
fi

# llama.cpp (TAPDIFF_LLAMA=OFF skips it): built from source by pip, without the multimodal library,
# for this CPU (ggml's default -march=native) but without AMX: a CPU may list AMX while the
# kernel under it does not give processes the tile state, and ggml's AMX kernels then die on an
# illegal instruction (measured: tilezero in ggml_backend_amx_mul_mat, a Xeon VM whose cpuinfo
# lists amx_int8; llama.cpp's CPU backend multiplies with AVX-512 VNNI instead). The stamp holds
# the requirements and the flags; a change rebuilds, bypassing pip's cache of the old wheel.
LLAMA_CFLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
llama_stamp="$VENV/.requirements-llama"
llama_build="$(cat "$LLAMA_REQUIREMENTS"; echo "CFLAGS=$LLAMA_CFLAGS")"
if [ "${TAPDIFF_LLAMA:-AUTO}" != OFF ] && [ "$llama_build" != "$(cat "$llama_stamp" 2>/dev/null)" ]; then
  echo "bootstrap: building llama-cpp-python from $LLAMA_REQUIREMENTS (libllama for --backend llama.cpp; a few minutes, once)"
  "$VENV/bin/python" -m pip uninstall -q -y llama-cpp-python >/dev/null 2>&1 || true
  CMAKE_ARGS="-DLLAVA_BUILD=OFF ${CMAKE_ARGS:-}" CFLAGS="$LLAMA_CFLAGS ${CFLAGS:-}" CXXFLAGS="$LLAMA_CFLAGS ${CXXFLAGS:-}" \
    "$VENV/bin/python" -m pip install -q --no-cache-dir --disable-pip-version-check -r "$LLAMA_REQUIREMENTS"
  echo "$llama_build" > "$llama_stamp"
fi

# transformers (TAPDIFF_TRANSFORMERS=OFF skips it): torch and its NVIDIA libraries, a few GB.
transformers_stamp="$VENV/.requirements-transformers"
if [ "${TAPDIFF_TRANSFORMERS:-AUTO}" != OFF ] && ! cmp -s "$TRANSFORMERS_REQUIREMENTS" "$transformers_stamp"; then
  echo "bootstrap: installing $TRANSFORMERS_REQUIREMENTS (torch and transformers for --backend transformers; ~3 GB, once)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$TRANSFORMERS_REQUIREMENTS"
  cp "$TRANSFORMERS_REQUIREMENTS" "$transformers_stamp"
fi
