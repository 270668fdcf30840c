"""A NaN or Inf planted in one weight: the reference and the engine both compute non-finite
values from the same tap on, and `tapdiff diff` / `check` must report where they start and
fail (exit 1), never crash and never pass because the two traces agree."""
import json
import os
import subprocess

import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
PLANT = os.environ["TAPDIFF_PLANT_NONFINITE"]
TOKENS = "1,70,200,33"


def run(*args, code):
    p = subprocess.run([*map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == code, f"{args}: exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


@pytest.mark.parametrize("arch,tensor,value,origin", [
    ("qwen2", "blk.1.attn_q.weight", "nan", "blk.1.attn_q"),
    ("llama", "blk.0.ffn_norm.weight", "inf", "blk.0.ffn_norm"),
])
def test_nonfinite_weight_is_a_finding_at_its_first_tap(tmp_path, arch, tensor, value, origin):
    clean, bad = tmp_path / "clean.gguf", tmp_path / "bad.gguf"
    run(TAPDIFF, "fixture", "--arch", arch, "--seed", 4, "-o", clean, code=0)
    run(PLANT, clean, bad, tensor, 5, value, code=0)
    ref, eng = tmp_path / "ref.h5", tmp_path / "eng.h5"
    run(TAPDIFF, "run", "--backend", "reference", "-m", bad, "--tokens", TOKENS, "-n", 3, "-o", ref, code=0)
    run(TAPDIFF, "run", "--backend", "host", "-m", bad, "--tokens", TOKENS, "-n", 3, "-o", eng, code=0)

    text = run(TAPDIFF, "diff", ref, eng, code=1).stdout
    assert f"non-finite values in both traces from {origin}, position 0" in text
    report = json.loads(run(TAPDIFF, "diff", ref, eng, "--format", "json", code=1).stdout)
    findings = [f for f in report["findings"] if f["kind"] == "non-finite"]
    assert [f["tap"] for f in findings] == [origin]

    check = run(TAPDIFF, "check", "-m", bad, "--tokens", TOKENS, "-n", 3, code=1)
    assert f"non-finite values in both traces from {origin}" in check.stdout


def test_clean_model_has_no_nonfinite_finding(tmp_path):
    clean = tmp_path / "clean.gguf"
    run(TAPDIFF, "fixture", "--arch", "qwen2", "--seed", 4, "-o", clean, code=0)
    check = run(TAPDIFF, "check", "-m", clean, "--tokens", TOKENS, "-n", 3, code=0)
    assert "non-finite" not in check.stdout
