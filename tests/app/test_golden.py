"""Golden traces: the committed set in fixtures/golden/ and `tapdiff golden update`."""
import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import h5py
import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
GOLDEN_DIR = Path(os.environ["TAPDIFF_SOURCE_DIR"]) / "fixtures" / "golden"
PROMPT = "1,70,200,33"


def run(*args, check_code=None, cwd=None):
    p = subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd)
    if check_code is not None:
        assert p.returncode == check_code, f"exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


def manifest():
    """{name: fixture args} from fixtures/golden/goldens.cmake."""
    text = (GOLDEN_DIR / "goldens.cmake").read_text()
    names = re.search(r"set\(TAPDIFF_GOLDENS ([^)]*)\)", text).group(1).split()
    return {n: re.search(rf"set\(TAPDIFF_GOLDEN_{re.escape(n)}_FIXTURE ([^)]*)\)", text).group(1).split()
            for n in names}


def test_committed_goldens_are_small_and_their_models_regenerate_bit_exactly(tmp_path):
    goldens = manifest()
    assert len(goldens) >= 3
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.h5")) == sorted(goldens)
    assert sum(p.stat().st_size for p in GOLDEN_DIR.glob("*.h5")) < 1_000_000
    for name, fixture_args in goldens.items():
        model = tmp_path / f"{name}.gguf"
        run("fixture", *fixture_args, "-o", model, check_code=0)
        info = json.loads(run("inspect", "--json", GOLDEN_DIR / f"{name}.h5", check_code=0).stdout)
        assert info["complete"] is True
        assert info["model"]["path"] == f"{name}.gguf"
        assert info["model"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest(), name


@pytest.fixture
def golden(tmp_path):
    """A fresh engine golden of a tiny llama, and its model, in tmp_path."""
    model = tmp_path / "m.gguf"
    run("fixture", "--arch", "llama", "--seed", 3, "-o", model, check_code=0)
    trace = tmp_path / "g.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 2, "-o", trace, check_code=0)
    return model, trace


def test_update_shows_the_changed_tap_and_overwrites_only_with_write(golden):
    _, trace = golden
    with h5py.File(trace, "r+", locking=False) as f:
        ffn_up = f["taps/ffn_up"]
        layer_1 = list(ffn_up.attrs["layers"]).index(1)
        ffn_up["batch"][layer_1, 0, 5] += 1e-3  # as if the engine had changed at this element of the prompt
    stale = trace.read_bytes()

    p = run("golden", "update", trace, check_code=1)
    assert re.search(r"changed: 1 of \d+ taps; first differing tap: blk\.1\.ffn_up", p.stdout), p.stdout
    row = next(line for line in p.stdout.splitlines() if line.split()[:1] == ["blk.1.ffn_up"])
    assert abs(float(row.split()[2]) - 1e-3) < 1e-6  # max abs
    assert "not written (dry run)" in p.stdout
    assert trace.read_bytes() == stale
    assert not Path(f"{trace}.new").exists()

    p = run("golden", "update", trace, "--write", check_code=0)
    assert "written" in p.stdout and trace.read_bytes() != stale
    p = run("golden", "update", trace, check_code=0)
    assert "unchanged" in p.stdout


def test_update_of_a_golden_recorded_by_a_buggy_engine_reports_the_divergence(golden, tmp_path):
    model, _ = golden
    trace = tmp_path / "buggy.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 2, "--inject", "attn-scale",
        "-o", trace, check_code=0)
    with h5py.File(trace, "r+", locking=False) as f:
        f.attrs["fault"] = "none"  # recorded before the fix: the golden claims a clean engine
    p = run("golden", "update", trace, check_code=1)
    assert "first differing tap: blk.0.attn.probs" in p.stdout
    assert "beyond the f32 tolerance profile: first divergence blk.0.attn.probs" in p.stdout


def test_golden_model_must_match_the_recorded_sha256(golden, tmp_path):
    _, trace = golden
    other = tmp_path / "other.gguf"
    run("fixture", "--arch", "llama", "--seed", 4, "-o", other, check_code=0)
    for command in (["golden", "update", trace, "--model", other], ["check", "--golden", trace, "--model", other]):
        p = run(*command, check_code=2)
        assert f"{trace}: model_sha256" in p.stderr and str(other) in p.stderr, p.stderr


def test_golden_model_not_found_exits_2(golden, tmp_path):
    model, trace = golden
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(model, moved / model.name)
    p = run("golden", "update", trace, check_code=2, cwd=tmp_path.parent)
    assert f"{trace}: model_path" in p.stderr and "was not found" in p.stderr
    p = run("golden", "update", trace, "--model-dir", moved, check_code=0, cwd=tmp_path.parent)
    assert "unchanged" in p.stdout


def test_update_usage_errors_exit_2(golden):
    model, trace = golden
    p = run("golden", "update", trace, trace, "--model", model, check_code=2)
    assert "--model" in p.stderr and "--model-dir" in p.stderr
    assert run("golden").returncode == 2


def test_an_external_golden_is_checked_but_not_regenerated(golden):
    model, trace = golden
    with h5py.File(trace, "r+", locking=False) as f:
        f.attrs["producer"] = "external"  # as if the user's own engine had recorded it
    p = run("golden", "update", trace, check_code=2)
    assert f"{trace}: producer" in p.stderr and "external engine" in p.stderr
    run("check", "--golden", trace, check_code=0)
