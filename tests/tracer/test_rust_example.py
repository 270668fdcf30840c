"""The Rust crate (examples/rust): dependency-free bindings to the C trace ABI and a tiny engine
built on them, where cargo exists (skipped otherwise). The crate's own tests (errors come back
as Result naming what was wrong), and the tiny engine's trace: the same toy model as the C
engine (examples/c_engine_tap.c), so `tapdiff diff` of the two traces passes, tap for tap."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

CARGO = shutil.which("cargo") or next(
    (str(p) for p in [Path.home() / ".cargo/bin/cargo"] if p.exists()), None)
CRATE = Path(os.environ["TAPDIFF_SOURCE_DIR"]) / "examples" / "rust"
TARGET = Path(os.environ["TAPDIFF_BINARY_DIR"]) / "rust"
pytestmark = pytest.mark.skipif(CARGO is None, reason="no cargo on this machine")


def cargo(*args):
    env = dict(os.environ, CARGO_TARGET_DIR=str(TARGET))  # TAPDIFF_TRACER_LIB, TAPDIFF_LINK_LIBS from CTest
    return subprocess.run([CARGO, *args, "--offline", "--release", "--manifest-path", str(CRATE / "Cargo.toml")],
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def tiny_engine():
    p = cargo("build")
    assert p.returncode == 0, p.stderr
    return TARGET / "release" / "tiny_engine"


def test_crate_tests_pass():
    p = cargo("test")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "3 passed" in p.stdout


def test_the_rust_engine_traces_the_c_engines_model(tiny_engine, tmp_path):
    rust, c = tmp_path / "rust.h5", tmp_path / "c.h5"
    assert subprocess.run([tiny_engine, rust]).returncode == 0
    assert subprocess.run([os.environ["TAPDIFF_C_ENGINE_TAP"], c]).returncode == 0
    d = subprocess.run([os.environ["TAPDIFF_BIN"], "diff", c, rust, "--format", "json"], capture_output=True, text=True)
    assert d.returncode == 0, d.stdout
    report = json.loads(d.stdout)
    # 39 recorded, and the attn.probs.summary of each layer the writer derives from its attn.probs.
    assert report["verdict"] == "pass" and len(report["taps"]) == 41


def test_the_rust_engine_honours_a_tap_filter_and_reports_errors(tiny_engine, tmp_path):
    trace = tmp_path / "filtered.h5"
    assert subprocess.run([tiny_engine, trace, "!*.attn.probs"]).returncode == 0
    inspect = subprocess.run([os.environ["TAPDIFF_BIN"], "inspect", trace, "--json"], capture_output=True, text=True)
    assert inspect.returncode == 0, inspect.stderr
    names = {t["name"] for t in json.loads(inspect.stdout)["taps"]}
    assert "attn.probs" not in names and "attn.out" in names
    p = subprocess.run([tiny_engine, tmp_path / "no-such-dir" / "t.h5"], capture_output=True, text=True)
    assert p.returncode == 2 and "no-such-dir" in p.stderr, p.stderr
