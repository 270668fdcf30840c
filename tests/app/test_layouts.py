"""Declared layouts (trace format 2.2): a producer that stores taps in its own layout (the row's
axes in another order, one tensor-parallel shard, a vocabulary padded to a block size) declares
it, and `tapdiff diff` aligns before comparing, says what it aligned, still finds a bug inside a
shard, and refuses to compare two different shards."""
import json
import os
import subprocess

import numpy as np
import pytest

from tapdiff_trace import TraceReader, TraceWriter

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = [1, 20, 40, 60, 80]


def run(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    model, ref = d / "m.gguf", d / "ref.h5"
    assert run("fixture", "--arch", "llama", "-o", model).returncode == 0
    r = run("run", "-m", model, "--tokens", ",".join(map(str, PROMPT)), "-n", 3, "-o", ref)
    assert r.returncode == 0, r.stderr
    return ref


def relayout(src, dst, layouts, store):
    """A copy of trace src whose taps named in layouts are stored as store(name, rows) returns them."""
    with TraceReader(str(src)) as r, TraceWriter(
            str(dst), producer="external", model_path=r.metadata["model_path"],
            model_sha256=r.metadata["model_sha256"], hparams=r.hparams, precision=r.metadata["precision"],
            prompt_length=r.metadata["prompt_length"], tokens=r.tokens, dims=r.dims, layouts=layouts) as w:
        for tap in r.taps():
            positions, rows = r.read(tap.name, tap.layer)
            if tap.name in layouts:
                rows = store(tap.name, rows)
            w.record(tap.name, tap.layer, int(positions[0]), rows)
        w.end_step()


def diff_json(ref, actual):
    r = run("diff", ref, actual, "--format", "json")
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def store_tp(dims, rank, count, vocab_pad):
    """attn_q as (head_dim, n_head); attn.probs as shard rank/count of the heads; logits padded."""
    n_head, head_dim = dims["n_head"], dims["head_dim"]

    def store(name, rows):
        n = rows.shape[0]
        if name == "attn_q":
            return rows.reshape(n, n_head, head_dim).transpose(0, 2, 1).copy()
        if name == "attn.probs":
            part = n_head // count
            return rows[:, rank * part:(rank + 1) * part, :].copy()
        if name == "output":
            return np.concatenate([rows, np.full((n, vocab_pad - rows.shape[1]), -1e4, np.float32)], axis=1)
        raise AssertionError(name)
    return store


def test_aligned_layouts_pass_and_say_what_was_aligned(reference, tmp_path):
    with TraceReader(str(reference)) as r:
        dims = r.dims
    pad = dims["n_vocab"] + 7
    layouts = {"attn_q": "axes=head_dim,n_head", "attn.probs": "shard=n_head:1/2", "output": f"pad=n_vocab:{pad}"}
    actual = tmp_path / "tp.h5"
    relayout(reference, actual, layouts, store_tp(dims, 1, 2, pad))

    with TraceReader(str(actual)) as t:  # stored as the producer keeps them
        assert t.format_version == (3, 0) and t.layouts == layouts
        assert t.tap("attn_q", 0).row_shape == (dims["head_dim"], dims["n_head"])
        assert t.tap("output").row_shape == (pad,)

    code, report = diff_json(reference, actual)
    assert code == 0 and report["verdict"] == "pass", report["first_divergence"]
    notes = {f["tap"]: f["detail"] for f in report["findings"] if f["kind"] == "layout"}
    assert "stored as (head_dim, n_head), aligned to (n_head, head_dim)" in notes["attn_q"]
    assert f"compares n_head {dims['n_head'] // 2}..{dims['n_head'] - 1}" in notes["attn.probs"]
    assert "7 padding entries dropped" in notes["output"]
    compared = {t["tap"] for t in report["taps"]}
    assert {"blk.0.attn_q", "blk.1.attn.probs", "output"} <= compared
    # Padding gone, the logits compare as the reference's: top-1 agrees everywhere.
    assert report["logits"]["same_top1_rate"] == 1.0

    inspect = json.loads(run("inspect", "--json", actual).stdout)
    assert inspect["producer"]["layouts"] == layouts and inspect["catalogue"]["ok"]
    probs = next(t for t in inspect["taps"] if t["full_name"] == "blk.0.attn.probs")
    assert probs["row_shape"] == [dims["n_head"] // 2, dims["n_ctx"]]


def test_a_bug_inside_a_shard_is_found_where_it_is(reference, tmp_path):
    with TraceReader(str(reference)) as r:
        dims = r.dims
    store = store_tp(dims, 0, 2, dims["n_vocab"])
    def broken(name, rows):
        rows = store(name, rows)
        if name == "attn.probs":
            rows = rows.copy()
            rows[len(PROMPT):, 0, :] = rows[len(PROMPT):, 0, ::-1]  # decode positions, head 0
        return rows
    actual = tmp_path / "broken.h5"
    relayout(reference, actual, {"attn.probs": "shard=n_head:0/2"}, broken)
    code, report = diff_json(reference, actual)
    assert code == 1
    first = report["first_divergence"]
    assert first["tap"] == "blk.0.attn.probs" and first["position"] == len(PROMPT)
    # A shard cannot be replayed as a whole row: no class is guessed from a part.
    assert report["diagnosis"]["class"] == "unexplained", report["diagnosis"]


def test_two_different_shards_are_not_compared(reference, tmp_path):
    with TraceReader(str(reference)) as r:
        dims = r.dims
    rank0, rank1 = tmp_path / "rank0.h5", tmp_path / "rank1.h5"
    relayout(reference, rank0, {"attn.probs": "shard=n_head:0/2"}, store_tp(dims, 0, 2, 0))
    relayout(reference, rank1, {"attn.probs": "shard=n_head:1/2"}, store_tp(dims, 1, 2, 0))
    code, report = diff_json(rank0, rank1)
    assert code == 0
    shards = [f for f in report["findings"] if f["kind"] == "layout" and "different shards" in f["detail"]]
    assert len(shards) == dims["n_layer"]
    assert not any(t["tap"].endswith("attn.probs") for t in report["taps"])


def test_a_layout_that_does_not_fit_is_exit_2(reference, tmp_path):
    with TraceReader(str(reference)) as r:
        dims = r.dims
    actual = tmp_path / "bad.h5"
    relayout(reference, actual, {"attn_q": "axes=head_dim,n_head"}, store_tp(dims, 0, 1, 0))
    import h5py
    with h5py.File(actual, "r+") as f:
        f["layouts"].attrs["attn_q"] = "axes=head_dim,n_vocab"
    r = run("diff", reference, actual)
    assert r.returncode == 2
    assert str(actual) in r.stderr and "/layouts" in r.stderr and "attn_q" in r.stderr
    assert "has the axes (n_head, head_dim)" in r.stderr
