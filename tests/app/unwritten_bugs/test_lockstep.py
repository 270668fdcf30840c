"""Lockstep traces (a run that continued from the expected values at every tap): fits read the
actual run's values, not the inputs the op was given; one bug in every layer is one root."""
import shutil

import numpy as np
import pytest

from bug_traces import run, read_tap, write_tap, diff_json, gguf_tensor, rmsnorm, rounded_to, causal_probs


@pytest.fixture(scope="module")
def lockstep(llama):
    """The clean engine in lockstep from the llama fixture's reference: it passes."""
    ls = llama / "lockstep.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--lockstep", llama / "ref.h5", "-o", ls)
    assert p.returncode == 0, p.stderr
    code, r = diff_json(llama / "ref.h5", ls, "--model", llama / "llama.gguf")
    assert code == 0 and r["mode"] == "lockstep", r["verdict"]
    return ls


def test_an_epsilon_nobody_listed_is_fitted_to_the_actual_values(llama, lockstep, tmp_path):
    """Layer 1's attn_norm with epsilon 1e-3 from the expected input it was given. The fit had read
    the expected trace's own values, which fit nothing."""
    bad = tmp_path / "ls.h5"
    shutil.copy(lockstep, bad)
    x = read_tap(llama / "ref.h5", "resid.ffn", 0)
    write_tap(bad, "attn_norm", 1, rmsnorm(x, gguf_tensor(llama / "llama.gguf", "blk.1.attn_norm.weight"), 1e-3))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and [root["tap"] for root in r["roots"]] == ["blk.1.attn_norm"], r["roots"]
    d = r["diagnosis"]
    assert d["class"] == "normalization" and "instead of the model's 1e-05 (fitted to the actual values)" in \
        d["variant"], d


def test_an_offset_in_every_layer_is_one_root(llama, lockstep, tmp_path):
    """The same vector added to attn_q's rows 1.. in both layers (a bias nobody listed): one root
    in lockstep, not one per layer (a signature had said more of layer 1's intact position 0)."""
    bad = tmp_path / "ls.h5"
    shutil.copy(lockstep, bad)
    offset = np.random.default_rng(5).normal(0, 0.5, 64)
    for layer in (0, 1):
        q = read_tap(bad, "attn_q", layer)
        q[1:] += offset
        write_tap(bad, "attn_q", layer, q)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and [(root["tap"], root["class"]) for root in r["roots"]] == [("blk.0.attn_q", "bias")], \
        r["roots"]
    assert "blk.1.attn_q" in r["roots"][0]["explained"], r["roots"][0]


def test_attention_over_a_16_bit_cache_is_the_caches_root(llama, lockstep, tmp_path):
    """An f32 engine whose layer 1 cache stores f16: lockstep writes the expected rows into it,
    rounded again, so attention reads f16 keys and values. Its output is the cache's error carried:
    one root with the cache's (blind round 11: attn.out was a root of its own)."""
    bad = tmp_path / "ls.h5"
    shutil.copy(lockstep, bad)
    ref = llama / "ref.h5"
    q = read_tap(ref, "attn_q.rope", 1).reshape(-1, 64)
    k16 = rounded_to("float16", read_tap(ref, "attn_k.rope", 1).reshape(-1, 32))
    v16 = rounded_to("float16", read_tap(ref, "attn_v", 1))
    write_tap(bad, "kv.k", 1, k16)
    write_tap(bad, "kv.v", 1, v16)
    probs = causal_probs(q, k16, 4, read_tap(bad, "attn.probs", 1).shape[2], [0, 0, 1, 1])
    write_tap(bad, "attn.probs", 1, probs)
    v = v16.reshape(len(v16), 2, 16)[:, [0, 0, 1, 1]]
    write_tap(bad, "attn.out", 1, np.einsum("phk,khe->phe", probs[:, :, :len(v)], v).reshape(len(v), -1))
    code, r = diff_json(ref, bad, "--model", llama / "llama.gguf")
    assert code == 1 and [(root["tap"], root["class"]) for root in r["roots"]] == [("blk.1.kv.k", "kv-cache")], \
        r["roots"]
    assert "blk.1.attn.out" in r["roots"][0]["explained"], r["roots"][0]


def test_an_unexplained_rope_in_every_layer_is_one_root(llama, lockstep, tmp_path):
    """q's and k's rotations wrong in both layers in a way no variant names, each layer's rows
    from another position on (where a rounded table's error shows): one bug, one root (blind round
    14: four roots)."""
    bad = tmp_path / "ls.h5"
    shutil.copy(lockstep, bad)
    rng = np.random.default_rng(11)
    for layer, first in ((0, 1), (1, 3)):
        for tap in ("attn_q.rope", "attn_k.rope"):
            rows = read_tap(bad, tap, layer)
            rows[first:] *= 1 + 0.01 * rng.standard_normal(rows[first:].shape)
            write_tap(bad, tap, layer, rows)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and [root["tap"] for root in r["roots"]] == ["blk.0.attn_q.rope"], \
        [(root["tap"], root["class"]) for root in r["roots"]]
    assert {"blk.0.attn_k.rope", "blk.1.attn_q.rope", "blk.1.attn_k.rope"} <= set(r["roots"][0]["explained"])


def test_a_row_under_the_threshold_is_confirmed_in_lockstep(llama, lockstep, tmp_path):
    """Layer 1's activation off by a few 1e-5 from the expected inputs it was given (nmse about
    4e-10: under the f32 threshold, over the floor): its replay confirms it, as in a normal trace
    (blind round 14: lockstep dropped every such row)."""
    bad = tmp_path / "ls.h5"
    shutil.copy(lockstep, bad)
    act = read_tap(bad, "ffn.act", 1)
    act *= 1 + 2e-5 * np.random.default_rng(3).standard_normal(act.shape)
    write_tap(bad, "ffn.act", 1, act)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and [root["tap"] for root in r["roots"]] == ["blk.1.ffn.act"], r["roots"]



def test_the_same_op_wrong_another_way_from_another_position_is_another_root(llama, lockstep, tmp_path):
    """Layer 0's decode steps add ffn_down twice; layer 1 never adds it, from position 0: the same
    op, the same class, two bugs (blind round 17, A13 and A14: one root had held both)."""
    bad = tmp_path / "ls.h5"
    shutil.copy(lockstep, bad)
    prompt = 6
    stream, down = read_tap(bad, "resid.ffn", 0), read_tap(bad, "ffn_down", 0)
    stream[prompt:] += down[prompt:]
    write_tap(bad, "resid.ffn", 0, stream)
    write_tap(bad, "resid.ffn", 1, read_tap(bad, "resid.attn", 1))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    roots = [(root["tap"], root["position"], root["class"]) for root in r["roots"]]
    assert code == 1 and roots == [("blk.0.resid.ffn", prompt, "residual"), ("blk.1.resid.ffn", 0, "residual")], roots


def test_nan_made_under_an_earlier_roots_error_is_a_root_of_its_own(llama, tmp_path):
    """--all on a normal trace: layer 1's gate projection wrong, and its activation, computed from
    that gate, overflowing to inf at position 2 (an f16 SwiGLU) from finite inputs. No replay
    measures an inf, so it had joined the root whose error its inputs carry (blind round 17, A03)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    gate = read_tap(bad, "ffn_gate", 1).astype(np.float64) * 1.5
    write_tap(bad, "ffn_gate", 1, gate)
    act = gate / (1 + np.exp(-gate)) * read_tap(bad, "ffn_up", 1)
    act[2, 3] = np.inf
    write_tap(bad, "ffn.act", 1, act)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    roots = [(root["tap"], root["class"]) for root in r["roots"]]
    assert code == 1 and roots[0][0] == "blk.1.ffn_gate" and ("blk.1.ffn.act", "non-finite") in roots, roots
