"""Zero false positives: the benign variants of the engine (f16 and bf16 storage, one or two
threads) against the f32 reference, on fixtures of both architectures and several tensor
types, must all PASS under the profile for their precision. Also prints, per run, the largest
NMSE seen, the evidence the profiles are calibrated from (docs/tolerance.md)."""
import json
import os
import subprocess

import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = "1,70,200,33,5,90,12,140"

# Both architectures x F32, BF16, Q4_K and Q4_K_M (llama.cpp's mix: Q6_K for attn_v, ffn_down
# and the head, Q4_K elsewhere); K-quants need rows of 256.
K_SHAPE = ["--n-embd", "256", "--n-ff", "512", "--n-head", "8", "--n-head-kv", "2"]
Q4_K_M = ["--type", "Q4_K", "--tensor-type", "blk.*.attn_v.weight=Q6_K", "--tensor-type",
          "blk.*.ffn_down.weight=Q6_K", "--tensor-type", "output.weight=Q6_K"]
FIXTURES = {
    "llama-f32": ["--arch", "llama", "--n-layer", "3"],
    "llama-bf16": ["--arch", "llama", "--type", "BF16"],
    "llama-q4_k": ["--arch", "llama", *K_SHAPE, "--type", "Q4_K"],
    "llama-q4_k_m": ["--arch", "llama", *K_SHAPE, *Q4_K_M],
    "qwen2-f32": ["--arch", "qwen2", "--n-layer", "3"],
    "qwen2-q8_0": ["--arch", "qwen2", "--n-layer", "3", "--type", "Q8_0"],
    "qwen2-bf16-tied": ["--arch", "qwen2", "--type", "BF16", "--tied", "--n-head", "8", "--n-head-kv", "8"],
    "qwen2-q4_k": ["--arch", "qwen2", *K_SHAPE, "--type", "Q4_K"],
    "qwen2-q4_k_m": ["--arch", "qwen2", *K_SHAPE, *Q4_K_M],
}


def tapdiff(*args, env=None):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("fp")
    for name, spec in FIXTURES.items():
        model = d / f"{name}.gguf"
        assert tapdiff("fixture", "--seed", "21", *spec, "-o", model).returncode == 0
        trace = d / f"{name}-ref.h5"
        p = tapdiff("run", "-m", model, "--tokens", PROMPT, "-n", "24", "-o", trace)
        assert p.returncode == 0, p.stderr
        out[name] = (model, trace)
    return out


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("precision", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_benign_variant_passes(references, tmp_path, fixture, precision, threads):
    model, ref = references[fixture]
    trace = tmp_path / "engine.h5"
    env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
    p = tapdiff("run", "--backend", "host", "--precision", precision, "-m", model, "--tokens", PROMPT, "-n", "24",
                "-o", trace, env=env)
    assert p.returncode == 0, p.stderr
    d = tapdiff("diff", ref, trace, "--format", "json")
    report = json.loads(d.stdout)
    worst = max(t["min_passing_nmse"] or 0 for t in report["taps"])
    print(f"{fixture} {precision} threads={threads}: largest nmse {worst:.3g}")
    assert d.returncode == 0, f"false positive: {fixture} {precision} threads={threads}\n" + tapdiff(
        "diff", ref, trace).stdout
