"""Shape findings and taps in one trace only, on traces written with python/tapdiff_trace.py: an
engine that sized its FFN buffers with n_embd instead of n_ff. Never a crash, never skipped, and
every report format says it."""
import json
import os
import subprocess

import numpy as np
import pytest

import tapdiff_trace as tt

TAPDIFF = os.environ["TAPDIFF_BIN"]
DIMS = {"n_layer": 2, "n_embd": 576, "n_head": 9, "n_head_kv": 3, "head_dim": 64, "n_ff": 1536,
        "n_vocab": 400, "n_ctx": 3}
TOKENS = [5, 9, 17]
SHA = "ab" * 32


def write(path, ffn_width, extra_tap=None, missing_tap=None):
    rng = np.random.default_rng(7)  # the same values in both traces where the shapes agree
    with tt.TraceWriter(str(path), producer="external", model_sha256=SHA, tokens=TOKENS,
                        prompt_length=len(TOKENS), dims=DIMS, hparams={"n_layer": 2}) as trace:
        trace.record("token_embd", -1, 0, rng.standard_normal((3, 576)))
        for layer in range(2):
            for name, width in (("ffn_norm", 576), ("ffn_gate", 1536), ("ffn_up", 1536), ("ffn.act", 1536),
                                ("ffn_down", 576)):
                rows = rng.standard_normal((3, width))
                if name == missing_tap:
                    continue
                if width == 1536:
                    rows = rows[:, :ffn_width]
                trace.record(name, layer, 0, rows)
        if extra_tap:
            trace.record(extra_tap, -1, 0, rng.standard_normal((3, 4)))
        trace.end_step()


def run(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=60)


@pytest.fixture
def traces(tmp_path):
    expected, actual = tmp_path / "expected.h5", tmp_path / "actual.h5"
    write(expected, 1536, missing_tap="ffn_down")
    write(actual, 576, extra_tap="my_engine.extra")
    return expected, actual


def test_wrong_width_is_a_shape_finding_with_its_explanation(traces):
    expected, actual = traces
    p = run("diff", expected, actual, "--format", "json")
    assert p.returncode == 1, p.stderr
    report = json.loads(p.stdout)
    assert report["verdict"] == "diverged"
    shapes = [r for r in report["roots"] if r["kind"] == "shape"]
    # One bug, one root: ffn_up (same inputs) and ffn.act (fed by them) join ffn_gate's root, and
    # so does layer 1's ffn_gate (the same tap with the same two shapes: one config value).
    assert [(r["tap"], r["class"], r["expected_shape"], r["actual_shape"]) for r in shapes] == [
        ("blk.0.ffn_gate", "shape", [1536], [576])]
    assert shapes[0]["explained"] == ["blk.0.ffn_up", "blk.0.ffn.act", "blk.1.ffn_gate", "blk.1.ffn_up",
                                      "blk.1.ffn.act"]
    # The shape mismatch is the root: it leads the headline and first_divergence.
    assert report["first_divergence"]["tap"] == "blk.0.ffn_gate"
    assert report["first_divergence"]["metrics"] is None
    assert report["summary"]["headline"].startswith("blk.0.ffn_gate")
    assert "n_embd used where n_ff belongs" in shapes[0]["diagnosis"]["variant"]
    found = {f["tap"]: f for f in report["findings"] if f["kind"] == "shape"}
    assert set(found) == {f"blk.{l}.{n}" for l in (0, 1) for n in ("ffn_gate", "ffn_up", "ffn.act")}
    assert found["blk.1.ffn.act"]["expected_shape"] == [1536] and found["blk.1.ffn.act"]["actual_shape"] == [576]


def test_taps_in_one_trace_only_are_listed(traces):
    expected, actual = traces
    findings = json.loads(run("diff", expected, actual, "--format", "json").stdout)["findings"]
    kinds = {(f["kind"], f["tap"]) for f in findings}
    assert {("missing-in-expected", "blk.0.ffn_down"), ("missing-in-expected", "blk.1.ffn_down"),
            ("missing-in-expected", "my_engine.extra")} <= kinds
    extra = next(f for f in findings if f["tap"] == "my_engine.extra")
    assert extra["detail"] == "recorded in the actual trace only: my_engine.extra is not a catalogue tap (docs/taps.md)"


@pytest.mark.parametrize("fmt", ["text", "md", "json", "junit", "html"])
def test_every_format_shows_shapes_and_missing_taps(traces, fmt):
    expected, actual = traces
    for flags in ((), ("--all",)):
        p = run("diff", expected, actual, "--format", fmt, *flags)
        assert p.returncode == 1, p.stderr
        out = p.stdout.replace("\\", "") if fmt == "md" else p.stdout  # Markdown escapes _ and [
        assert "blk.0.ffn_gate" in out and "n_embd used where n_ff belongs" in out, fmt
        # The human formats name the taps one trace lacks together ("ffn_down in layers 0-1").
        missing = "ffn_down in layers 0-1" if fmt in ("text", "md", "html") else "blk.1.ffn_down"
        assert "my_engine.extra" in out and missing in out, fmt


def test_attention_rows_wider_than_the_context_say_padding(tmp_path):
    """attn.probs rows padded to an engine's KV allocation (32 keys for a context of 3): the width
    is called wider than the context, whatever model dimension it happens to equal (n_head_kv *
    head_dim here would be 192)."""
    paths = []
    for name, width in (("expected.h5", 3), ("actual.h5", 192)):
        rows = np.zeros((3, 9, width), np.float32)
        rows[:, :, 0] = 1.0
        path = tmp_path / name
        with tt.TraceWriter(str(path), producer="external", model_sha256=SHA, tokens=TOKENS,
                            prompt_length=len(TOKENS), dims=DIMS, hparams={"n_layer": 2}) as trace:
            trace.record("attn.probs", 0, 0, rows)
            trace.end_step()
        paths.append(path)
    p = run("diff", *paths)
    assert "wider than the run's context (n_ctx 3), as a KV cache allocated for 192 positions" in p.stdout, p.stdout
    assert "used where" not in p.stdout


def test_a_width_that_equals_the_context_is_still_named_by_its_tap(tmp_path):
    """ffn_gate of n_embd where n_ff belongs, in runs whose context is n_ff long: the FFN's
    mix-up, not attention's padding (only attn.probs rows have a context axis)."""
    dims = dict(DIMS, n_ctx=1536)
    paths = []
    for name, width in (("expected.h5", 1536), ("actual.h5", 576)):
        path = tmp_path / name
        with tt.TraceWriter(str(path), producer="external", model_sha256=SHA, tokens=TOKENS,
                            prompt_length=len(TOKENS), dims=dims, hparams={"n_layer": 2}) as trace:
            trace.record("ffn_gate", 0, 0, np.ones((3, width)))
            trace.end_step()
        paths.append(path)
    p = run("diff", *paths)
    assert "n_embd used where n_ff belongs" in p.stdout and "wider than" not in p.stdout, p.stdout
