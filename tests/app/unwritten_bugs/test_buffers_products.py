"""Buffers and products: values kept in 16 bits, rows written in part, GEMMs on stale buffers or
wrong from a batch row, products stopping short, scales nobody listed, a layer loop one short."""
import shutil

import h5py
import numpy as np
import pytest

from bug_traces import PROMPT, run, read_tap, write_tap, diff_json, rounded_to, gguf_tensor, rmsnorm, diagnose


@pytest.mark.parametrize("dtype,name,profile", [("float16", "float16", "f16"), ("bfloat16", "bfloat16", "bf16")])
def test_values_stored_in_16_bits_under_an_f32_label_are_named(llama, tmp_path, dtype, name, profile):
    """A producer that stores every value in 16 bits and labels its trace f32: the diff says so,
    not "a scale factor", and names no buffer (the whole trace is 16-bit, not one tap)."""
    stored = tmp_path / f"{dtype}.h5"
    shutil.copy(llama / "eng.h5", stored)
    with h5py.File(stored, "r+") as f:
        for stack in f["taps"].values():
            for part in ("data", "batch"):
                if part in stack and stack[part].dtype == np.float32 and stack[part].size:
                    stack[part][...] = rounded_to(dtype, stack[part][...])
    code, r = diff_json(llama / "ref.h5", stored, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "token_embd"
    assert r["diagnosis"]["class"] == "unexplained", r["diagnosis"]
    wanted = f"every actual value is a {name} number and not every expected one"
    assert any(wanted in s for s in r["diagnosis"]["signatures"]), r["diagnosis"]["signatures"]
    assert any(f"--profile {profile}" in s for s in r["diagnosis"]["signatures"])


@pytest.mark.parametrize("k, words", [(np.log(2), "exp2 in the softmax"), (0.8, "fitted")])
def test_a_scale_nobody_listed_is_fitted(llama, tmp_path, k, words):
    """Scores scaled by a factor no named variant has: exp2 in the softmax with no log2(e) in
    the scores (ln 2 times the right scale), or any temperature. Once was "unexplained" at f32
    and, at f16, named 1/sqrt(kv_dim), which lies 2% from ln 2 / sqrt(head_dim)."""
    bad = tmp_path / "scaled-scores.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 0).astype(np.float64)
    scaled = np.where(probs > 0, probs, 1.0) ** k * (probs > 0)  # softmax(k s) ∝ softmax(s)^k
    write_tap(bad, "attn.probs", 0, scaled / scaled.sum(axis=-1, keepdims=True))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn.probs", r["first_divergence"]
    assert r["diagnosis"]["class"] == "attention-scale" and words in r["diagnosis"]["variant"], r["diagnosis"]


@pytest.mark.parametrize("tap, weight, k, decode_only, words", [
    ("attn_q", "attn_q", 56, True, "columns 0..55 only (56 of 64: the product's loop stopped short in decode steps"),
    ("ffn_down", "ffn_down", 120, False, "columns 0..119 only (120 of 128: the product's loop stopped short, fitted")])
def test_a_product_stopping_short_of_the_row_is_fitted(llama, tmp_path, tap, weight, k, decode_only, words):
    """A matrix-vector loop that leaves the row's last columns out: in the decode kernel only (the
    prefill's GEMM right), or in every product of the op."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    W = gguf_tensor(llama / "llama.gguf", f"blk.0.{weight}.weight")
    x = read_tap(bad, "attn_norm" if tap == "attn_q" else "ffn.act", 0).astype(np.float64)
    y = read_tap(bad, tap, 0).astype(np.float64)
    first = len(PROMPT.split(",")) if decode_only else 0
    y[first:] = x[first:, :k] @ W.reshape(y.shape[1], x.shape[1])[:, :k].T
    write_tap(bad, tap, 0, y)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", f"blk.0.{tap}", words, "matmul-layout")


def test_a_gemm_accumulating_onto_a_stale_buffer_is_fitted(llama, tmp_path):
    """attn_output's GEMM run with beta = 1 in decode steps, onto a buffer the step before left
    holding the last layer's ffn_down: the first decode step's slot holds the prefill's row 0."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    prompt = len(PROMPT.split(","))
    rows, stale = read_tap(bad, "attn_output", 0), read_tap(bad, "ffn_down", 1)
    for q in range(prompt, len(rows)):
        rows[q] += stale[0 if q == prompt else q - 1]
    write_tap(bad, "attn_output", 0, rows)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("blk.0.attn_output", prompt)
    d = r["diagnosis"]
    assert (d["class"], d["evidence"]) == ("buffer", "reproduced"), d
    assert "added onto blk.1.ffn_down's row from the step before" in d["variant"], d


def test_a_layer_loop_that_stops_one_short_is_named(llama, tmp_path):
    """`l < n_layer - 1` where `l <= n_layer - 1` belonged: the last layer never runs, its taps are
    never recorded, and the final norm reads the stream as the layer before left it."""
    bad = tmp_path / "eng.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6, "--layers", "0",
            "-o", bad)
    assert p.returncode == 0, p.stderr
    from gguf import GGUFReader
    eps = float(next(f for f in GGUFReader(llama / "llama.gguf").fields.values()
                     if f.name.endswith("layer_norm_rms_epsilon")).parts[-1][0])
    w = gguf_tensor(llama / "llama.gguf", "output_norm.weight")
    write_tap(bad, "output_norm", -1, rmsnorm(read_tap(bad, "resid.ffn", 0), w, eps))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "output_norm", r["first_divergence"]
    d = r["diagnosis"]
    assert (d["class"], d["evidence"]) == ("layer-loop", "reproduced") and "layer 1 never ran" in d["variant"], d


def test_the_head_reading_the_hidden_states_one_layer_early_is_named(llama, tmp_path):
    """Every layer ran, but the final norm read the stream layer 0 left (hidden_states[-2] for
    [-1]): layer 1's output dropped. Was unexplained (blind round 12, transformers)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    w = gguf_tensor(llama / "llama.gguf", "output_norm.weight")
    write_tap(bad, "output_norm", -1, rmsnorm(read_tap(bad, "resid.ffn", 0), w, 1e-5))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output_norm", "layer 1's output dropped (the head read the "
             "hidden states one layer early)", "layer-loop")


@pytest.mark.parametrize("recorded", ["0,2", "0-2"])
def test_a_middle_layer_that_never_runs_or_is_dropped_is_named(tmp_path, recorded):
    """Pipeline stages [0, n/2) and [n/2 + 1, n): layer 1 of 3 never runs (none of its taps
    recorded), or runs and its output is dropped (`layer(h)` not assigned back); layer 2's norm
    reads the stream as layer 0 left it. Was unexplained (blind round 14, B18)."""
    model = tmp_path / "l3.gguf"
    assert run("fixture", "--arch", "llama", "--n-layer", 3, "--seed", 4, "-o", model).returncode == 0
    for backend, out, layers in (("reference", "ref.h5", "0-2"), ("host", "eng.h5", recorded)):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 2, "--layers", layers,
                "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    w = gguf_tensor(model, "blk.2.attn_norm.weight")
    write_tap(tmp_path / "eng.h5", "attn_norm", 2, rmsnorm(read_tap(tmp_path / "eng.h5", "resid.ffn", 0), w, 1e-5))
    words = ("layer 1 never ran" if recorded == "0,2" else
             "layer 1's output dropped (layer 2 read the hidden states one layer early)")
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "blk.2.attn_norm", words, "layer-loop")


def test_a_split_k_product_reading_the_first_halfs_columns_twice_is_named(llama, tmp_path):
    """ffn_down split over two halves of n_ff, the second half's panel multiplied by the first
    half's weight columns (its offset not advanced). Was unexplained (blind round 17, A06)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    act = read_tap(bad, "ffn.act", 0).astype(np.float64)
    W = gguf_tensor(llama / "llama.gguf", "blk.0.ffn_down.weight").reshape(64, -1)
    half = W.shape[1] // 2
    write_tap(bad, "ffn_down", 0, act[:, :half] @ W[:, :half].T + act[:, half:] @ W[:, :half].T)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn_down", "the second multiplied by the first half's "
             "columns", "matmul-layout")


def test_a_gemm_wrong_from_one_batch_row_on_points_at_its_tiling(llama, tmp_path):
    """The batched GEMM's rows 4 and up of the prompt wrong (a tile edge), decode steps right."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    rows = read_tap(bad, "attn_q", 0)
    prompt = len(PROMPT.split(","))
    rows[4:prompt] = rows[4:prompt] * 0.5 + 0.25
    write_tap(bad, "attn_q", 0, rows)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q", "rows 4.. of each prefill batch",
             "matmul-layout", "indicated", position=4)


def test_rows_carrying_an_earlier_roots_error_are_not_called_right(llama, tmp_path):
    """In --all, layer 1's attn_q rows 1..2 carry its norm's error (inherited: the jump test lets
    them pass) and rows 3..5 are wrong of their own: rows before 3 are not right, so no GEMM tile
    edge at batch row 3 is indicated. Was (blind round 11, a bias added to one row only)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    x = read_tap(bad, "attn_norm", 1)
    x[1:3] *= 1.01
    write_tap(bad, "attn_norm", 1, x)
    q = read_tap(bad, "attn_q", 1)
    q[1:3] = x[1:3] @ gguf_tensor(llama / "llama.gguf", "blk.1.attn_q.weight").T
    q[3:len(PROMPT.split(","))] = q[3:len(PROMPT.split(","))] * 0.5 + 0.25
    write_tap(bad, "attn_q", 1, q)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    roots = {root["tap"]: root for root in r["roots"]}
    assert code == 1 and "blk.1.attn_q" in roots and roots["blk.1.attn_q"]["position"] == 3, r["roots"]
    assert roots["blk.1.attn_q"]["class"] != "matmul-layout", roots["blk.1.attn_q"]

def test_k_rounded_to_f16_in_an_f32_run_is_named(llama, tmp_path):
    """An f32 engine whose cache path rounds K to half precision (V left in f32)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "kv.k", 0, read_tap(bad, "kv.k", 0).astype(np.float16).astype(np.float32))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.kv.k", "rounded to f16 before it is cached",
             "kv-cache")


@pytest.mark.parametrize("tap, layer, dtype, words", [("attn_norm", 1, "bfloat16", "rounded to bf16"),
                                                       ("ffn_up", 0, "bfloat16-truncated", "truncated to bf16")])
def test_one_tap_kept_in_16_bits_in_an_f32_run_is_named(llama, tmp_path, tap, layer, dtype, words):
    """Probabilities kept in half precision for P·V; a norm output in a bf16 scratch buffer."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, tap, layer, rounded_to(dtype, read_tap(bad, tap, layer)))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", f"blk.{layer}.{tap}", words, "buffer")


def test_a_row_written_only_in_part_is_named(llama, tmp_path):
    """The head's GEMM given a row count rounded down: the last logits never written (zero)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    logits = read_tap(bad, "output", -1)
    assert logits.shape[1] == 320
    logits[:, 256:] = 0  # a GEMM tiled by 256 columns that drops the partial tile
    write_tap(bad, "output", -1, logits)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output",
             "only the first 256 of 320 elements written, the rest left zero (320 rounded down to a multiple of 256)",
             "buffer")


def test_heads_accumulated_into_one_another_are_named(llama, tmp_path):
    """Blind round 27: an accumulator not cleared between heads: slot h holds heads 0..h summed."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    out = read_tap(bad, "attn.out", 0)
    heads = out.reshape(out.shape[0], 4, 16)
    write_tap(bad, "attn.out", 0, np.cumsum(heads, axis=1).reshape(out.shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.out",
             "head h's slot holds the sum of heads 0..h", "buffer", position=0)


def test_a_decode_norm_over_last_steps_row_is_named(llama, tmp_path):
    """Blind round 27: a decode step's ffn_norm over resid.attn's previous row (its input buffer not
    updated for the step)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    prompt = len(PROMPT.split(","))
    rows = read_tap(bad, "ffn_norm", 0)
    rows[prompt:] = rows[prompt - 1:-1]
    write_tap(bad, "ffn_norm", 0, rows)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn_norm",
             "in decode steps, the norm of its input's previous position", "buffer", position=prompt)
