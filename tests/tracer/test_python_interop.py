"""Python <-> C++ interop of traces: python/tapdiff_trace.py writes what the C++ reader reads
(checked through trace_test_dump) and reads what the C++ writer writes; the h5py-only example
in docs/trace-schema.md produces a valid trace."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import tapdiff_trace as tt

SOURCE_DIR = Path(os.environ["TAPDIFF_SOURCE_DIR"])
WRITER = os.environ["TAPDIFF_TRACE_WRITER"]
DUMP = os.environ["TAPDIFF_TRACE_DUMP"]
C_ENGINE = os.environ["TAPDIFF_C_ENGINE_TAP"]
CATALOGUE_LAYER_TAPS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q.rope", "attn_k.rope"]


def tap_value(tap, layer, position, i):
    """Same as tests/tracer/support/test_values.hpp."""
    k = (tap * 131 + (layer + 1) * 17 + position * 7 + i) % 1000
    return np.float32(k / 8.0 - 60.0)


def tap_row(tap, layer, position, width):
    return np.array([tap_value(tap, layer, position, i) for i in range(width)], dtype=np.float32)


def dump(path, values=True):
    args = [DUMP] + (["--values"] if values else []) + [str(path)]
    result = subprocess.run(args, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_python_writes_cpp_reads(tmp_path):
    path = tmp_path / "py.h5"
    rng = np.random.default_rng(7)
    embd = rng.standard_normal((3, 8)).astype(np.float32)
    probs = rng.random((3, 2, 5)).astype(np.float32)
    q = rng.standard_normal((1, 8)).astype(np.float32)
    dims = dict(n_layer=1, n_embd=8, n_head=2, n_head_kv=1, head_dim=4, n_ff=16, n_vocab=32,
                n_ctx=5)
    with tt.TraceWriter(str(path), producer="reference", producer_version="py-1",
                        git_commit="cafe", model_path="m.gguf", model_sha256="b" * 64,
                        hparams={"n_layer": 1, "eps": 1e-6, "arch": "llama", "tied": True},
                        precision="f32", fault="none", prompt_length=3, tokens=[4, 5, 6],
                        dims=dims) as w:
        w.record("token_embd", -1, 0, embd)
        w.record("attn.probs", 0, 0, probs)
        w.end_step()
        w.append_tokens([7])
        w.record("attn_q", 0, 3, q)
        w.record("token_embd", -1, 7, embd[:1])  # a gap: positions 0..2, then 7
        w.end_step()

    got = dump(path)
    assert got["complete"] is True
    assert got["committed_steps"] == 2
    assert got["producer"] == {"kind": "reference", "version": "py-1", "git_commit": "cafe"}
    assert got["model"]["sha256"] == "b" * 64
    assert got["model"]["hparams"] == {"n_layer": 1, "eps": 1e-6, "arch": "llama", "tied": 1}
    assert got["tokens"] == [4, 5, 6, 7]
    assert got["prompt_length"] == 3
    assert got["dims"] == dims
    taps = {t["full_name"]: t for t in got["taps"]}
    assert taps["token_embd"]["positions"] == "0-2,7"
    assert taps["blk.0.attn.probs"]["row_shape"] == [2, 5]
    values = got["values"]
    embd_values = np.array(values["token_embd"]["values"], np.float32).reshape(4, 8)
    np.testing.assert_array_equal(embd_values, np.concatenate([embd, embd[:1]]))
    np.testing.assert_array_equal(np.array(values["blk.0.attn.probs"]["values"], np.float32),
                                  probs.reshape(-1))
    assert values["blk.0.attn_q"]["positions"] == [3]


def test_cpp_writes_python_reads(tmp_path):
    path = tmp_path / "cpp.h5"
    subprocess.run([WRITER, "--out", str(path), "--steps", "5", "--layers", "2", "--taps", "3",
                    "--width", "16"], check=True, capture_output=True)
    with tt.TraceReader(str(path)) as r:
        assert r.complete
        assert r.committed_steps == 5
        assert r.metadata["producer"] == "external"
        assert r.hparams == {"n_layer": 2, "kind": "test"}
        np.testing.assert_array_equal(r.tokens, [1000 + p for p in range(5)])
        assert len(r.taps()) == 3 * 2 + 1
        for t, name in enumerate(CATALOGUE_LAYER_TAPS[:3]):
            for layer in range(2):
                positions, values = r.read(name, layer)
                np.testing.assert_array_equal(positions, np.arange(5))
                for p in range(5):
                    np.testing.assert_array_equal(values[p], tap_row(t, layer, p, 16))
        positions, values = r.read("output", -1, 1, 3)
        np.testing.assert_array_equal(positions, [1, 2, 3])
        np.testing.assert_array_equal(values[0], tap_row(3, -1, 1, 16))
    # Closed traces have exact dataset shapes: plain h5py needs no tapdiff code.
    with h5py.File(path, "r") as f:
        assert f["taps/blk.1.attn_k/data"].shape == (5, 16)
        assert f.attrs["format"] == "tapdiff-trace"


def test_python_reads_an_interrupted_cpp_trace(tmp_path):
    path = tmp_path / "unclosed.h5"
    subprocess.run([WRITER, "--out", str(path), "--steps", "4", "--no-close"], check=True,
                   capture_output=True)
    with tt.TraceReader(str(path)) as r:
        assert not r.complete
        assert r.committed_steps == 4
        positions, values = r.read("attn_norm", 1)
        np.testing.assert_array_equal(positions, np.arange(4))
        np.testing.assert_array_equal(values[3], tap_row(0, 1, 3, 16))


def test_uncommitted_rows_are_invisible_to_both_readers(tmp_path):
    path = tmp_path / "abandoned.h5"
    w = tt.TraceWriter(str(path), tokens=[1])
    for p in range(3):
        w.record("attn_v", 2, p, np.full((1, 4), p, np.float32))
        w.end_step()
    w.record("attn_v", 2, 3, np.full((1, 4), 3, np.float32))  # no end_step
    w.record("new_tap", 0, 3, np.ones((1, 2), np.float32))
    w.abandon()
    with tt.TraceReader(str(path)) as r:
        assert not r.complete
        assert [t.full_name for t in r.taps()] == ["blk.2.attn_v"]
        assert r.tap("attn_v", 2).n_rows == 3
    got = dump(path)
    assert got["complete"] is False
    assert [t["full_name"] for t in got["taps"]] == ["blk.2.attn_v"]
    assert got["values"]["blk.2.attn_v"]["positions"] == [0, 1, 2]


def test_python_reads_the_c_example(tmp_path):
    path = tmp_path / "c.h5"
    subprocess.run([C_ENGINE, str(path)], check=True)
    with tt.TraceReader(str(path)) as r:
        n_head, n_ctx = r.dims["n_head"], r.dims["n_ctx"]
        positions, probs = r.read("attn.probs", 0)
        assert probs.shape == (n_ctx, n_head, n_ctx)
        for p, row in zip(positions, probs):
            np.testing.assert_allclose(row[:, : p + 1].sum(axis=1), 1.0, rtol=1e-5)
            assert not row[:, p + 1:].any()


def test_writer_rejections_name_the_tap(tmp_path):
    with tt.TraceWriter(str(tmp_path / "r.h5")) as w:
        w.record("attn_q", 0, 0, np.zeros((1, 4), np.float32))
        with pytest.raises(tt.TraceError, match=r"/taps/blk.0.attn_q: row shape \[2, 2\] differs"):
            w.record("attn_q", 0, 1, np.zeros((1, 2, 2), np.float32))
        with pytest.raises(tt.TraceError, match="positions of a tap must increase"):
            w.record("attn_q", 0, 0, np.zeros((1, 4), np.float32))
        with pytest.raises(tt.TraceError, match="producer"):
            tt.TraceWriter(str(tmp_path / "p.h5"), producer="gpu")


def test_readers_refuse_a_newer_major_version(tmp_path):
    path = tmp_path / "v2.h5"
    with tt.TraceWriter(str(path)):
        pass
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = "2.1"
    with pytest.raises(tt.TraceError, match="format_version 2.1"):
        tt.TraceReader(str(path))
    result = subprocess.run([DUMP, str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"{path}: /: format_version 2.1 is newer than this reader supports" in result.stderr


def test_schema_doc_example_writes_a_valid_trace(tmp_path):
    """The h5py-only example in docs/trace-schema.md is complete enough to write a trace."""
    doc = (SOURCE_DIR / "docs" / "trace-schema.md").read_text()
    match = re.search(r"<!-- BEGIN h5py-example -->\s*```python\n(.*?)```", doc, re.S)
    assert match, "docs/trace-schema.md lacks the h5py example block"
    path = tmp_path / "by_hand.h5"
    subprocess.run([sys.executable, "-c", match.group(1), str(path)], check=True)
    got = dump(path)
    assert got["complete"] is True
    assert {t["full_name"] for t in got["taps"]} == {"token_embd", "blk.0.attn_q"}
    assert got["values"]["blk.0.attn_q"]["positions"] == [0, 1, 2]


def test_precreated_taps_take_the_recorded_shape(tmp_path):
    path = tmp_path / "pre.h5"
    with tt.TraceWriter(str(path), precreate=[("attn_q", 0, [4]), ("attn_k", 0, [2])]) as w:
        w.record("attn_q", 0, 0, np.ones((1, 6), np.float32))  # not the declared [4]
        w.end_step()
    with tt.TraceReader(str(path)) as r:
        assert [(t.full_name, t.row_shape) for t in r.taps()] == [("blk.0.attn_q", (6,))]
    assert [t["full_name"] for t in dump(path)["taps"]] == ["blk.0.attn_q"]
