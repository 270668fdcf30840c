"""Python <-> C++ interop of traces: python/tapdiff_trace.py writes what the C++
reader reads (checked through trace_test_dump) and reads what the C++ writer writes; the
h5py-only example in docs/trace-schema.md produces a valid trace; both readers refuse the same
malformed stacks."""

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


def slot_of(group, layer):
    return list(group.attrs["layers"]).index(layer)


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
                        dims=dims, settings={"kv_type": "f16", "threads": 2},
                        unavailable={"kv.k": "no node holds it"},
                        layouts={"attn_q": "axes=head_dim,n_head"}) as w:
        w.record("token_embd", -1, 0, embd)
        w.record("attn.probs", 0, 0, probs)
        w.end_step()
        w.append_tokens([7])
        w.record("attn_q", 0, 3, q.reshape(1, 2, 4).transpose(0, 2, 1))  # stored (head_dim, n_head)
        w.record("token_embd", -1, 7, embd[:1])  # a gap: positions 0..2, then 7
        w.end_step()

    got = dump(path)
    assert got["complete"] is True
    assert got["committed_steps"] == 2
    assert got["producer"] == {"kind": "reference", "version": "py-1", "git_commit": "cafe",
                               "settings": {"kv_type": "f16", "threads": 2},
                               "unavailable": {"kv.k": "no node holds it"},
                               "layouts": {"attn_q": "axes=head_dim,n_head"}}
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
    # The C++ reader aligns the declared layout back to the catalogue's [n_head * head_dim].
    assert taps["blk.0.attn_q"]["stored_shape"] == [4, 2] and taps["blk.0.attn_q"]["row_shape"] == [8]
    np.testing.assert_array_equal(np.array(values["blk.0.attn_q"]["values"], np.float32), q.reshape(-1))


def test_a_lockstep_run_written_from_python_says_so_to_the_cpp_reader(tmp_path):
    """lockstep_source= (docs/guide.md, "Lockstep in your own engine"): the trace every tap point
    continued from; absent for a normal run."""
    for source, expected in (("ref.h5", "ref.h5"), ("", None)):
        path = tmp_path / f"ls{bool(source)}.h5"
        with tt.TraceWriter(str(path), tokens=[1, 2], prompt_length=2, lockstep_source=source) as w:
            w.record("token_embd", -1, 0, np.ones((2, 4), np.float32))
            w.end_step()
        assert dump(path, values=False)["lockstep_source"] == expected
    with pytest.raises(tt.TraceError, match="lockstep_source: expected the path"):
        tt.TraceWriter(str(tmp_path / "bad.h5"), lockstep_source=1)


def test_a_tap_filter_written_from_python_reaches_the_cpp_reader(tmp_path):
    """tap_filter= says which taps the run recorded on purpose (`tapdiff run --taps/--layers`):
    both readers read it back, and a key it does not know is refused."""
    path = tmp_path / "filtered.h5"
    chosen = {"names": "blk.*.resid.ffn,output", "layers": "0-1", "positions": ""}
    with tt.TraceWriter(str(path), tokens=[1, 2], prompt_length=2, tap_filter=chosen) as w:
        w.record("resid.ffn", 0, 0, np.ones((2, 4), np.float32))
        w.end_step()
    with tt.TraceReader(str(path)) as r:
        assert r.filter == chosen
    assert dump(path, values=False)["filter"] == {"names": "blk.*.resid.ffn,output", "layers": "0-1", "positions": ""}
    with pytest.raises(tt.TraceError, match="tap_filter: expected strings under the keys names, layers, positions"):
        tt.TraceWriter(str(tmp_path / "bad.h5"), tap_filter={"taps": "blk.*"})


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
        g = f["taps/attn_k"]
        assert sorted(g.attrs["layers"]) == [0, 1]
        assert g["data"].shape == (5, 2, 16)
        np.testing.assert_array_equal(g["data"][4, slot_of(g, 1)], tap_row(2, 1, 4, 16))
        assert f.attrs["format"] == "tapdiff-trace"


def test_python_reads_a_cpp_prompt_from_the_batch(tmp_path):
    """A batched first step (the prompt) is stored slot-major in each stack's batch; both readers
    and plain h5py (with stack_rows) see one sequence of rows across it and the decode steps."""
    path = tmp_path / "prompt.h5"
    subprocess.run([WRITER, "--out", str(path), "--prompt", "6", "--steps", "3", "--layers", "2",
                    "--taps", "2", "--width", "8"], check=True, capture_output=True)
    with tt.TraceReader(str(path)) as r:
        for t, name in enumerate(CATALOGUE_LAYER_TAPS[:2]):
            for layer in range(2):
                assert r.tap(name, layer).batch_rows == 6
                positions, values = r.read(name, layer)
                np.testing.assert_array_equal(positions, np.arange(8))
                for p in range(8):
                    np.testing.assert_array_equal(values[p], tap_row(t, layer, p, 8))
                positions, values = r.read(name, layer, 5, 6)  # across the batch's end
                np.testing.assert_array_equal(positions, [5, 6])
                np.testing.assert_array_equal(values[1], tap_row(t, layer, 6, 8))
    with h5py.File(path, "r") as f:
        g = f["taps/attn_norm"]
        assert g["batch"].shape == (2, 6, 8) and g["data"].shape == (8, 2, 8)
        s = slot_of(g, 1)
        rows, _, batch = f["committed"][g.attrs["index"][s]]
        np.testing.assert_array_equal(tt.stack_rows(g, s, 0, rows, batch)[7], tap_row(0, 1, 7, 8))
    assert dump(path)["complete"] is True


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


def test_uncommitted_rows_slots_and_stacks_are_invisible_to_both_readers(tmp_path):
    path = tmp_path / "abandoned.h5"
    w = tt.TraceWriter(str(path), tokens=[1])
    for p in range(3):
        w.record("attn_v", 2, p, np.full((1, 4), p, np.float32))
        w.end_step()
    w.record("attn_v", 2, 3, np.full((1, 4), 3, np.float32))  # no end_step
    w.record("attn_v", 5, 3, np.ones((1, 4), np.float32))  # a new slot of the stack
    w.record("new_tap", 0, 3, np.ones((1, 2), np.float32))  # a new stack
    w.abandon()
    with h5py.File(path, "r+") as f:
        g = f["taps/attn_v"]
        assert list(g.attrs["layers"]) == [2, 5] and f["committed"].shape == (1, 3)
        assert "new_tap" in f["taps"]
        # As if the writer had died between writing row 3 and committing it.
        g["data"].resize(max(4, g["data"].shape[0]), axis=0)
        g["data"][3, 0] = 3
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


def test_writer_rejections_name_the_stack_and_layer(tmp_path):
    with tt.TraceWriter(str(tmp_path / "r.h5")) as w:
        w.record("attn_q", 0, 0, np.zeros((1, 4), np.float32))
        with pytest.raises(tt.TraceError,
                           match=r"/taps/attn_q: layer 0: row shape \[2, 2\] differs from \[4\]"):
            w.record("attn_q", 0, 1, np.zeros((1, 2, 2), np.float32))
        with pytest.raises(tt.TraceError, match="layer 0: .*positions of a tap must increase"):
            w.record("attn_q", 0, 0, np.zeros((1, 4), np.float32))
        with pytest.raises(tt.TraceError, match="producer"):
            tt.TraceWriter(str(tmp_path / "p.h5"), producer="gpu")
    with pytest.raises(tt.TraceError, match="/taps/attn_k: layer 1: listed twice in precreate"):
        tt.TraceWriter(str(tmp_path / "twice.h5"),
                       precreate=[("attn_k", 1, [4]), ("attn_k", 1, [8])])


def write_header_only(path, version):
    with tt.TraceWriter(str(path)):
        pass
    with h5py.File(path, "r+") as f:
        f.attrs["format_version"] = version


def test_both_readers_accept_a_newer_minor_version(tmp_path):
    path = tmp_path / "v3.9.h5"
    write_header_only(path, "3.9")
    with tt.TraceReader(str(path)) as r:
        assert r.format_version == (3, 9)
    assert dump(path)["complete"] is True


@pytest.mark.parametrize("version, message", [
    ("4.0", "format_version 4.0 is newer than this reader supports (3.x): upgrade tapdiff to read it"),
    ("1.0", "format_version 1.0 is older than any this reader supports (2.x to 3.x): record the trace "
            "again with this tapdiff"),
])
def test_both_readers_refuse_another_major_version(tmp_path, version, message):
    path = tmp_path / f"v{version}.h5"
    write_header_only(path, version)
    with pytest.raises(tt.TraceError, match=re.escape(f"{path}: /: {message}")):
        tt.TraceReader(str(path))
    result = subprocess.run([DUMP, str(path)], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"{path}: /: {message}" in result.stderr


def test_schema_doc_example_writes_a_valid_trace(tmp_path):
    """The h5py-only example in docs/trace-schema.md is complete enough to write a trace."""
    doc = (SOURCE_DIR / "docs" / "trace-schema.md").read_text()
    match = re.search(r"<!-- BEGIN h5py-example -->\s*```python\n(.*?)```", doc, re.S)
    assert match, "docs/trace-schema.md lacks the h5py example block"
    path = tmp_path / "by_hand.h5"
    subprocess.run([sys.executable, "-c", match.group(1), str(path)], check=True)
    got = dump(path)
    assert got["complete"] is True
    assert {t["full_name"] for t in got["taps"]} == {"token_embd", "blk.0.attn_q", "blk.1.attn_q"}
    assert got["values"]["blk.1.attn_q"]["positions"] == [0, 1, 2]
    with tt.TraceReader(str(path)) as r:
        q1 = r.read("attn_q", 1)[1]
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(q1, f["taps/attn_q/data"][:, 1])


def test_precreated_slot_recorded_with_another_shape_moves_to_that_shape_stack(tmp_path):
    path = tmp_path / "pre.h5"
    with tt.TraceWriter(str(path), precreate=[("attn_q", 0, [4]), ("attn_k", 0, [2])]) as w:
        w.record("attn_q", 0, 0, np.ones((1, 6), np.float32))  # not the declared [4]
        w.end_step()
    with tt.TraceReader(str(path)) as r:
        assert [(t.full_name, t.row_shape, t.stack) for t in r.taps()] == [
            ("blk.0.attn_q", (6,), "attn_q#2")]
    with h5py.File(path, "r") as f:
        old, new = f["taps/attn_q"], f["taps/attn_q#2"]
        assert list(old.attrs["layers"]) == list(new.attrs["layers"]) == [0]
        assert new.attrs["name"] == "attn_q"
        assert int(new.attrs["index"][0]) not in (int(old.attrs["index"][0]),
                                                  int(f["taps/attn_k"].attrs["index"][0]))
        assert list(f["committed"][old.attrs["index"][0]]) == [0, 0, 0]
    assert [t["full_name"] for t in dump(path)["taps"]] == ["blk.0.attn_q"]


def test_precreated_stacks_hold_all_their_slots_from_the_first_commit(tmp_path):
    path = tmp_path / "pre_only.h5"
    tt.TraceWriter(str(path), chunk_bytes=1024,
                   precreate=[("attn_v", layer, [4]) for layer in range(3)]).abandon()
    with h5py.File(path, "r") as f:
        g = f["taps/attn_v"]
        assert list(g.attrs["layers"]) == [0, 1, 2]
        assert sorted(g.attrs["index"]) == [0, 1, 2]
        assert g["data"].chunks == (1024 // (4 * 4 * 3), 3, 4)  # a row of every slot per chunk
        assert f["committed"][:].tolist() == [[0, 0, 0]] * 3
    with tt.TraceReader(str(path)) as r:
        assert r.taps() == []  # slots without rows are not taps


def test_layers_of_a_name_share_a_stack_written_once_per_step(tmp_path, monkeypatch):
    writes = []
    original = h5py.Dataset.__setitem__

    def counting(ds, key, value):
        writes.append(ds.name)
        original(ds, key, value)

    path = tmp_path / "stack.h5"
    rows = {(layer, p): np.full((1, 8), 10 * layer + p, np.float32)
            for layer in range(4) for p in range(2)}
    with tt.TraceWriter(str(path), tokens=[1, 2]) as w:
        monkeypatch.setattr(h5py.Dataset, "__setitem__", counting)
        for p in range(2):
            for layer in (2, 0, 3, 1):
                w.record("attn_q", layer, p, rows[(layer, p)])
            w.end_step()
        monkeypatch.undo()
    assert writes.count("/taps/attn_q/data") == 2
    assert writes.count("/taps/attn_q/runs") == 1  # one run per slot, written with the first rows
    with h5py.File(path, "r") as f:
        g = f["taps/attn_q"]
        assert list(g.attrs["layers"]) == [2, 0, 3, 1]
        assert len(set(g.attrs["index"])) == 4
        assert g["data"].shape == (2, 4, 8)
        for s, layer in enumerate(g.attrs["layers"]):
            np.testing.assert_array_equal(g["data"][:, s], np.concatenate([rows[(layer, 0)],
                                                                            rows[(layer, 1)]]))
    values = dump(path)["values"]
    for layer in range(4):
        np.testing.assert_array_equal(np.array(values[f"blk.{layer}.attn_q"]["values"]),
                                      [10 * layer] * 8 + [10 * layer + 1] * 8)


def test_a_second_row_shape_of_a_name_gets_its_own_stack(tmp_path):
    path = tmp_path / "shapes.h5"
    with tt.TraceWriter(str(path), tokens=[1]) as w:
        w.record("ffn_up", 0, 0, np.full((1, 16), 1, np.float32))
        w.record("ffn_up", 1, 0, np.full((1, 8), 2, np.float32))
        w.record("ffn_up", 2, 0, np.full((1, 16), 3, np.float32))
        w.end_step()
    with h5py.File(path, "r") as f:
        assert sorted(f["taps"]) == ["ffn_up", "ffn_up#2"]
        assert list(f["taps/ffn_up"].attrs["layers"]) == [0, 2]
        assert list(f["taps/ffn_up#2"].attrs["layers"]) == [1]
        assert list(f["taps/ffn_up#2"].attrs["row_shape"]) == [8]
    with tt.TraceReader(str(path)) as r:
        assert {t.full_name: t.row_shape for t in r.taps()} == {
            "blk.0.ffn_up": (16,), "blk.1.ffn_up": (8,), "blk.2.ffn_up": (16,)}
        np.testing.assert_array_equal(r.read("ffn_up", 1)[1], np.full((1, 8), 2, np.float32))
        np.testing.assert_array_equal(r.read("ffn_up", 2)[1], np.full((1, 16), 3, np.float32))
    got = dump(path)
    assert {t["full_name"]: t["row_shape"] for t in got["taps"]} == {
        "blk.0.ffn_up": [16], "blk.1.ffn_up": [8], "blk.2.ffn_up": [16]}
    assert got["values"]["blk.1.ffn_up"]["values"] == [2.0] * 8


def test_slots_of_a_stack_record_different_positions(tmp_path):
    path = tmp_path / "positions.h5"
    recorded = {0: [0, 1, 2, 3, 4], 1: [0, 2, 3], 2: [3, 4]}  # layer 2 joins at step 3
    with tt.TraceWriter(str(path), tokens=range(5)) as w:
        for p in range(5):
            for layer, positions in recorded.items():
                if p in positions:
                    w.record("kv.k", layer, p, np.full((1, 2, 3), 100 * layer + p, np.float32))
            w.end_step()
    expected_runs = {0: [(0, 0)], 1: [(0, 0), (1, 2)], 2: [(0, 3)]}
    with h5py.File(path, "r") as f:
        g = f["taps/kv.k"]
        assert g["data"].shape == (5, 3, 2, 3)  # trimmed to the longest slot
        for layer, runs in expected_runs.items():
            s = slot_of(g, layer)
            n_rows, n_runs, _ = f["committed"][g.attrs["index"][s]]
            assert n_rows == len(recorded[layer])
            assert [tuple(r) for r in g["runs"][:n_runs, s]] == runs
    with tt.TraceReader(str(path)) as r:
        for layer, positions in recorded.items():
            got_positions, values = r.read("kv.k", layer)
            assert list(got_positions) == positions
            assert list(values[:, 0, 0]) == [100 * layer + p for p in positions]
        assert list(r.read("kv.k", 1, 1, 3)[0]) == [2, 3]
    values = dump(path)["values"]
    for layer, positions in recorded.items():
        assert values[f"blk.{layer}.kv.k"]["positions"] == positions
        assert values[f"blk.{layer}.kv.k"]["values"][::6] == [100 * layer + p for p in positions]


@pytest.fixture
def two_stacks(tmp_path):
    """attn_q layers 0 and 1 of width 4 in /taps/attn_q, layer 2 of width 2 in /taps/attn_q#2."""
    path = tmp_path / "two_stacks.h5"
    with tt.TraceWriter(str(path), tokens=[1]) as w:
        for layer, width in ((0, 4), (1, 4), (2, 2)):
            w.record("attn_q", layer, 0, np.ones((1, width), np.float32))
        w.end_step()
    return path


@pytest.mark.parametrize("stack, attr, value, message", [
    ("attn_q#2", "layers", [1], "/taps/attn_q#2: slot 0 (layer 1): the tap blk.1.attn_q has rows "
                                "in slot 1 of /taps/attn_q too"),
    ("attn_q", "layers", [1, 1], "/taps/attn_q: attribute 'layers': 1 appears more than once"),
    ("attn_q", "index", [0], "/taps/attn_q: attributes 'layers' and 'index': expected the same "
                             "length, got 2 and 1"),
    ("attn_q", "layers", [-2, 0], "/taps/attn_q: attribute 'layers': bad layer -2"),
    ("attn_q", "index", [0, 2], "/taps/attn_q#2: attribute 'index': slot 0 (layer 2): 2 is also "
                                "the index of slot 1 of /taps/attn_q"),
    ("attn_q#2", "index", [7], "/taps/attn_q#2: attribute 'index': slot 0 (layer 2): 7 is outside "
                               "/committed (3 rows)"),
    ("attn_q#2", "row_shape", [4],
     "/taps/attn_q#2/data: expected shape [*, >= 1, 4], got [1, 1, 2]"),
])
def test_both_readers_refuse_malformed_stacks(two_stacks, stack, attr, value, message):
    with h5py.File(two_stacks, "r+") as f:
        f[f"taps/{stack}"].attrs[attr] = np.array(value, np.int64)
    with pytest.raises(tt.TraceError, match=re.escape(f"{two_stacks}: {message}")):
        tt.TraceReader(str(two_stacks))
    result = subprocess.run([DUMP, str(two_stacks)], capture_output=True, text=True)
    assert result.returncode == 2, result.stdout
    assert f"{two_stacks}: {message.split(':')[0]}" in result.stderr, result.stderr


def runs_not_from_row_0(f):
    f["taps/attn_q#2/runs"][0, 0] = (1, 0)
    return "/taps/attn_q#2/runs: slot 0 (layer 2): run 0: expected rows and positions to increase"


def data_of_rank_2(f):
    del f["taps/attn_q#2/data"]
    f["taps/attn_q#2"].create_dataset("data", data=np.ones((1, 2), np.float32))
    return "/taps/attn_q#2/data: expected rank 3, got 2"


def more_committed_rows_than_data(f):
    f["committed"][int(f["taps/attn_q#2"].attrs["index"][0])] = (5, 1, 0)
    return "/taps/attn_q#2/data: slot 0 (layer 2): 5 committed rows"


def more_batch_rows_than_rows(f):
    f["committed"][int(f["taps/attn_q#2"].attrs["index"][0])] = (1, 1, 2)
    return "/committed: row 2 (blk.2.attn_q): 2 rows in the stack's batch, expected 0 to its 1 rows"


def batch_rows_without_a_batch(f):
    f["committed"][int(f["taps/attn_q#2"].attrs["index"][0])] = (1, 1, 1)
    return "/taps/attn_q#2/batch: missing dataset"


@pytest.mark.parametrize("damage", [runs_not_from_row_0, data_of_rank_2,
                                    more_committed_rows_than_data, more_batch_rows_than_rows,
                                    batch_rows_without_a_batch])
def test_both_readers_refuse_malformed_stack_datasets(two_stacks, damage):
    with h5py.File(two_stacks, "r+") as f:
        message = damage(f)
    with pytest.raises(tt.TraceError, match=re.escape(f"{two_stacks}: {message}")):
        tt.TraceReader(str(two_stacks))
    result = subprocess.run([DUMP, str(two_stacks)], capture_output=True, text=True)
    assert result.returncode == 2, result.stdout
    assert f"{two_stacks}: {message.split(':')[0]}" in result.stderr, result.stderr


def test_python_writer_derives_the_attention_summary_as_the_cpp_one_does(tmp_path):
    # Same rows as tests/tracer/test_attn_summary.cpp: head 0 on key p = 2, head 1 even over
    # keys 0..2 with a quarter of its weight on future key 4.
    probs = np.array([[[0, 0, 1, 0, 0], [0.25, 0.25, 0.25, 0, 0.25]]], dtype=np.float32)
    own = np.full((1, 2, 4), 0.5, dtype=np.float32)
    path = tmp_path / "summary.h5"
    with tt.TraceWriter(str(path), tokens=[1, 2, 3], prompt_length=3) as w:
        w.record("attn.probs", 0, 2, probs)
        w.record("attn.probs", 1, 2, probs)
        w.record("attn.probs.summary", 1, 2, own)  # a producer's own summary stays
        w.end_step()
    with tt.TraceReader(str(path)) as r:
        _, derived = r.read("attn.probs.summary", 0)
        _, kept = r.read("attn.probs.summary", 1)
    np.testing.assert_array_equal(derived[0], [[0, 1, 1, 0], [0, 0.25, 0.25 * 7 / 2, 0.25]])
    np.testing.assert_array_equal(kept, own)
    # Both readers see the same values: the C++ one through trace_test_dump.
    values = dump(path)["values"]
    np.testing.assert_array_equal(np.array(values["blk.0.attn.probs.summary"]["values"], dtype=np.float32),
                                  derived.ravel())


def test_precreating_the_summary_with_or_without_its_probabilities(tmp_path):
    # A copy loop precreates every tap of a trace in reader order (attn.probs, then its summary):
    # the writer adds the summaries it derives only where the list does not name them itself.
    probs = np.array([[[0, 0, 1, 0, 0], [0.25, 0.25, 0.25, 0, 0.25]]], dtype=np.float32)
    for order in ([("attn.probs", 0, (2, 5)), ("attn.probs.summary", 0, (2, 4))],
                  [("attn.probs.summary", 0, (2, 4)), ("attn.probs", 0, (2, 5))],
                  [("attn.probs", 0, (2, 5))]):
        path = tmp_path / "precreated.h5"
        with tt.TraceWriter(str(path), tokens=[1, 2, 3], prompt_length=3, precreate=order) as w:
            w.record("attn.probs", 0, 2, probs)
            w.end_step()
        with tt.TraceReader(str(path)) as r:
            _, summary = r.read("attn.probs.summary", 0)
        np.testing.assert_array_equal(summary[0], [[0, 1, 1, 0], [0, 0.25, 0.25 * 7 / 2, 0.25]])
        assert dump(path)["complete"] is True
