"""Norms, the FFN and the residual stream: statistics over the wrong rows or count, epsilons,
post-norms misplaced or unused, activations and their constants, adds from the wrong input."""
import shutil

import numpy as np
import pytest

from bug_traces import (PROMPT, read_tap, write_tap, traced, diff_json, gguf_tensor, rmsnorm, diagnose,
                        gguf_field)


def rescale_norm_input(path, c, stream_too):
    """blk.0.attn_norm as RMSNorm of c times its input (token_embd), and, with stream_too,
    blk.0.resid.attn adding c times the stream: an op scaling the stream after token_embd's tap.
    Without it, only the norm moved: what a wrong epsilon (eps / c²) does."""
    eps = 1e-5  # the llama fixture's
    x = read_tap(path, "token_embd", -1).astype(np.float64)
    y = read_tap(path, "attn_norm", 0).astype(np.float64)
    ms = (x * x).mean(axis=1, keepdims=True)
    write_tap(path, "attn_norm", 0, y * np.sqrt(ms + eps) / np.sqrt(ms + eps / c**2))
    if stream_too:
        write_tap(path, "resid.attn", 0, c * x + read_tap(path, "attn_output", 0))


@pytest.mark.parametrize("stream_too, bug_class", [(True, "embedding"), (False, "normalization")])
def test_a_stream_scaled_after_its_tap_is_not_an_epsilon(llama, tmp_path, stream_too, bug_class):
    """RMSNorm(c·x) with eps is RMSNorm(x) with eps / c²: a stream scaled by √n_embd after the
    token_embd tap (Gemma's embedding scale where the model has none) fits an epsilon exactly.
    The residual add that reads the same stream tells the two apart."""
    bad = tmp_path / "scaled.h5"
    shutil.copy(llama / "eng.h5", bad)
    rescale_norm_input(bad, 8.0, stream_too)  # n_embd 64
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1, r
    assert (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("blk.0.attn_norm", 0), r["summary"]
    assert r["diagnosis"]["class"] == bug_class, r["diagnosis"]


def test_a_norm_over_n_minus_1_is_named(llama, tmp_path):
    """RMSNorm whose mean square divides by n - 1: a scale a hair under 1 that no epsilon fits
    at every row."""
    bad = tmp_path / "n-minus-1.h5"
    shutil.copy(llama / "eng.h5", bad)
    eps = 1e-5  # the llama fixture's
    x = read_tap(bad, "token_embd", -1).astype(np.float64)
    y = read_tap(bad, "attn_norm", 0).astype(np.float64)
    squares = (x * x).sum(axis=1, keepdims=True)
    n = x.shape[1]
    write_tap(bad, "attn_norm", 0, y * np.sqrt(squares / n + eps) / np.sqrt(squares / (n - 1) + eps))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn_norm", r["first_divergence"]
    assert r["diagnosis"]["class"] == "normalization" and "n - 1" in r["diagnosis"]["variant"], r["diagnosis"]


def test_a_post_norm_after_the_residual_add_is_named(gemma2, tmp_path):
    """gemma2's post-attention norm applied to the stream after the add, as a post-LN block does."""
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    w = gguf_tensor(gemma2 / "gemma2.gguf", "blk.0.post_attention_norm.weight")
    stream = read_tap(bad, "token_embd", -1) + read_tap(bad, "attn_output", 0)
    write_tap(bad, "attn_post_norm", 0, rmsnorm(stream, w, 1e-6))
    diagnose(gemma2 / "ref.h5", bad, gemma2 / "gemma2.gguf", "blk.0.attn_post_norm",
             "post-norm applied after the residual add", "normalization")


def test_a_per_head_norm_over_the_whole_row_is_named(tmp_path):
    """qwen3's q norm taking its mean square over every head at once, the weight still per head."""
    model = traced(tmp_path, "qwen3", "--arch", "qwen3", n=2)
    w = gguf_tensor(model, "blk.0.attn_q_norm.weight")
    q = read_tap(tmp_path / "eng.h5", "attn_q", 0).astype(np.float64)
    q = q.reshape(q.shape[0], -1)
    normed = q / np.sqrt((q * q).mean(axis=-1, keepdims=True) + 1e-6) * np.tile(w, q.shape[1] // w.size)
    write_tap(tmp_path / "eng.h5", "attn_q_norm", 0, normed.reshape(read_tap(tmp_path / "eng.h5", "attn_q_norm", 0).shape))
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "blk.0.attn_q_norm", "over the whole row",
             "normalization")


def test_a_q_norm_run_over_ks_head_count_is_named(tmp_path):
    """qwen3's q norm launched with n_head_kv heads: q's heads from n_head_kv on left as they came."""
    model = traced(tmp_path, "qwen3", "--arch", "qwen3", n=2)
    eng = tmp_path / "eng.h5"
    n_kv = int(gguf_field(model, "qwen3.attention.head_count_kv"))
    d = gguf_tensor(model, "blk.0.attn_q_norm.weight").size
    q, normed = read_tap(eng, "attn_q", 0), read_tap(eng, "attn_q_norm", 0)
    heads = normed.reshape(normed.shape[0], -1, d).copy()
    assert n_kv < heads.shape[1]
    heads[:, n_kv:] = q.reshape(heads.shape)[:, n_kv:]
    write_tap(eng, "attn_q_norm", 0, heads.reshape(normed.shape))
    diagnose(tmp_path / "ref.h5", eng, model, "blk.0.attn_q_norm", f"over n_head_kv = {n_kv} heads", "normalization")


def test_a_post_norm_left_unused_is_named(gemma2, tmp_path):
    """gemma2's post-attention norm computed, and the residual add fed attn_output instead of it."""
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    stream = read_tap(bad, "token_embd", -1) + read_tap(bad, "attn_output", 0)
    write_tap(bad, "resid.attn", 0, stream)
    diagnose(gemma2 / "ref.h5", bad, gemma2 / "gemma2.gguf", "blk.0.resid.attn",
             "attn_post_norm computed and left unused", "residual")


def test_a_per_head_norm_run_on_rows_of_n_embd_over_n_head_is_named(tmp_path):
    """qwen3 with head_dim 32 over n_embd 64 and 4 heads: a q norm run on rows of n_embd / n_head
    = 16 elements, as if that were the head size, each applying the weight's first 16."""
    model = traced(tmp_path, "qwen3", "--arch", "qwen3", "--head-dim", 32, n=2)
    w = gguf_tensor(model, "blk.0.attn_q_norm.weight")
    q = read_tap(tmp_path / "eng.h5", "attn_q", 0).astype(np.float64)
    groups = q.reshape(q.shape[0], -1, 16)
    write_tap(tmp_path / "eng.h5", "attn_q_norm", 0, rmsnorm(groups, w[:16], 1e-6).reshape(q.shape))
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "blk.0.attn_q_norm",
             "rows of 16 = n_embd / n_head elements", "normalization")


def test_a_norm_off_by_one_factor_per_row_points_at_its_statistic(llama, tmp_path):
    """A reduction that leaves out the last of every 32 slots: each row's mean square short of a
    few terms, no listed variant, each row the right one times a factor of its own."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    from gguf import GGUFReader
    eps = float(next(f for f in GGUFReader(llama / "llama.gguf").fields.values()
                     if f.name.endswith("layer_norm_rms_epsilon")).parts[-1][0])
    x = read_tap(bad, "token_embd", -1).astype(np.float64)
    kept = (np.arange(x.shape[1]) % 32 != 31)
    squares = (x * x * kept).sum(axis=-1, keepdims=True) / x.shape[1]
    w = gguf_tensor(llama / "llama.gguf", "blk.0.attn_norm.weight")
    write_tap(bad, "attn_norm", 0, x / np.sqrt(squares + eps) * w)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_norm", "statistic", "normalization", "indicated")


def test_silu_of_the_product_is_named(llama, tmp_path):
    """silu(gate * up) where the model gates: silu(gate) * up."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    gu = read_tap(bad, "ffn_gate", 0).astype(np.float64) * read_tap(bad, "ffn_up", 0)
    write_tap(bad, "ffn.act", 0, gu / (1 + np.exp(-gu)))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn.act", "applied to the product", "activation")


def test_a_swiglu_limit_the_model_lacks_is_fitted(llama, tmp_path):
    """gpt-oss's clamped SwiGLU, silu(min(gate, c)) * clamp(up, -c, c), switched on for a model
    without a limit (a missing key defaulting to 7): only the elements past c change. Was
    unexplained (blind round 14, B05)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    gate, up = read_tap(bad, "ffn_gate", 1).astype(np.float64), read_tap(bad, "ffn_up", 1).astype(np.float64)
    c = round(float(np.quantile(np.maximum(gate, np.abs(up)), 0.9)), 3)
    g = np.minimum(gate, c)
    write_tap(bad, "ffn.act", 1, g / (1 + np.exp(-g)) * np.clip(up, -c, c))
    d = diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.ffn.act", "a SwiGLU limit", "activation")
    assert f"c = {c:.4g}" in d["variant"], (c, d["variant"])


def test_a_norm_whose_sum_of_squares_overflows_f16_is_named(llama, tmp_path):
    """A half-precision RMSNorm kernel: squares summed in f16 overflow past 65504 on a row with a
    massive activation (as SmolLM2's first position carries), and x / sqrt(inf) is an all-zero
    row. Both traces' stream scaled up at position 0 (the norm of it is the same), the actual's
    norm zero there. Was "never written" (blind round 15, X11)."""
    for name in ("ref.h5", "eng.h5"):
        shutil.copy(llama / name, tmp_path / name)
        stream = read_tap(tmp_path / name, "resid.attn", 1)
        stream[0] *= 400
        write_tap(tmp_path / name, "resid.attn", 1, stream)
    normed = read_tap(tmp_path / "eng.h5", "ffn_norm", 1)
    assert (stream[0].astype(np.float64) ** 2).sum() > 65504 > (stream[1].astype(np.float64) ** 2).sum()
    normed[0] = 0
    write_tap(tmp_path / "eng.h5", "ffn_norm", 1, normed)
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", llama / "llama.gguf", "blk.1.ffn_norm",
             "the sum of squares accumulated in f16: past 65504 it overflows", "normalization", position=0)


def test_a_sigmoid_through_tanh_without_half_the_argument_is_named(llama, tmp_path):
    """SiLU's sigmoid written 0.5 * (1 + tanh(x)), the x / 2 forgotten. Was unexplained (blind
    round 16, W3)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    gate = read_tap(bad, "ffn_gate", 0).astype(np.float64)
    write_tap(bad, "ffn.act", 0, gate * 0.5 * (1 + np.tanh(gate)) * read_tap(bad, "ffn_up", 0))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn.act", "the sigmoid written through tanh",
             "activation")


def test_the_gates_buffer_overwritten_by_up_is_named(llama, tmp_path):
    """The up GEMV writing into the gate's scratch row: act = silu(up) * up. Was unexplained
    (blind round 17, A12)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    up = read_tap(bad, "ffn_up", 1).astype(np.float64)
    write_tap(bad, "ffn.act", 1, up / (1 + np.exp(-up)) * up)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.ffn.act", "silu(ffn_up) * ffn_up", "buffer")


def test_a_silu_read_from_a_float16_table_is_named(llama, tmp_path):
    """SiLU looked up in a table indexed by the gate's f16 bits that holds f16 values, as ggml's
    tables did (nmse about 1e-7). Was unexplained (blind round 11)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    gate = read_tap(bad, "ffn_gate", 1).astype(np.float16).astype(np.float64)
    silu = (gate / (1 + np.exp(-gate))).astype(np.float16).astype(np.float64)
    write_tap(bad, "ffn.act", 1, silu * read_tap(bad, "ffn_up", 1))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.ffn.act", "silu(ffn_gate) read from a float16 table",
             "activation")


def test_the_exact_gelu_under_the_threshold_is_found_and_named(gemma2, tmp_path):
    """gemma2's tanh GELU computed exactly (erf): on a small model's small gates the two differ by
    an nmse of ~1e-9, under the f32 threshold, but thousands of times the inputs' error, and the
    op replayed from its own inputs confirms it. Was a PASS."""
    from math import erf
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    g = read_tap(bad, "ffn_gate", 0).astype(np.float64)
    exact = 0.5 * g * (1 + np.vectorize(erf)(g / np.sqrt(2)))
    write_tap(bad, "ffn.act", 0, exact * read_tap(bad, "ffn_up", 0))
    code, r = diff_json(gemma2 / "ref.h5", bad, "--model", gemma2 / "gemma2.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.ffn.act", r["first_divergence"]
    assert r["first_divergence"]["metrics"]["nmse"] < 1e-8, r["first_divergence"]  # under the threshold
    assert any(f["kind"] == "below-threshold" and f["tap"] == "blk.0.ffn.act" for f in r["findings"]), r["findings"]
    d = r["diagnosis"]
    assert d["class"] == "activation" and "exact (erf) GELU" in d["variant"], d


@pytest.mark.parametrize("k, c, words", [(np.sqrt(2 / np.pi), 0.04715, "0.04715 for 0.044715"),
                                         (0.7878845608, 0.044715, "0.7879 for sqrt(2/pi)")])
def test_a_gelu_constant_mistyped_is_fitted(gemma2, tmp_path, k, c, words):
    """gemma2's tanh GELU with one of its constants mistyped."""
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    g, u = (read_tap(bad, t, 1).astype(np.float64) for t in ("ffn_gate", "ffn_up"))
    write_tap(bad, "ffn.act", 1, 0.5 * g * (1 + np.tanh(k * (g + c * g ** 3))) * u)
    diagnose(gemma2 / "ref.h5", bad, gemma2 / "gemma2.gguf", "blk.1.ffn.act", words, "activation")


def test_the_previous_layers_norm_weight_is_named(llama, tmp_path):
    """Layer 1's FFN indexed with a counter still at layer 0: its norm weight is layer 0's."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    w0, w1 = (gguf_tensor(llama / "llama.gguf", f"blk.{l}.ffn_norm.weight") for l in (0, 1))
    write_tap(bad, "ffn_norm", 1, read_tap(bad, "ffn_norm", 1) / w1 * w0)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.ffn_norm", "blk.0.ffn_norm.weight (another layer's weight",
             "weight-loading")


def test_a_norm_over_the_whole_batch_is_named(llama, tmp_path):
    """RMSNorm's mean square taken over every element of the prefill batch, not per row."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    eps = float(gguf_field(llama / "llama.gguf", "llama.attention.layer_norm_rms_epsilon"))
    x = read_tap(bad, "token_embd", -1).astype(np.float64)
    y = read_tap(bad, "attn_norm", 0).astype(np.float64)
    prompt = len(PROMPT.split(","))
    rows = np.sqrt((x[:prompt] ** 2).mean(axis=1) + eps)
    batch = np.sqrt((x[:prompt] ** 2).mean() + eps)
    y[:prompt] *= (rows / batch)[:, None]
    write_tap(bad, "attn_norm", 0, y)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_norm", "every row of the prefill batch",
             "normalization")


def test_the_down_projection_fed_the_gate_is_named(llama, tmp_path):
    """ffn_down multiplying ffn_gate: an activation assumed to be in place."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    w = gguf_tensor(llama / "llama.gguf", "blk.0.ffn_down.weight")  # (n_embd, n_ff)
    write_tap(bad, "ffn_down", 0, read_tap(bad, "ffn_gate", 0).astype(np.float64) @ w.T)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn_down", "W applied to ffn_gate", "buffer")


def test_a_silu_with_its_exponent_sign_flipped_is_named(llama, tmp_path):
    """g / (1 + exp(g)) · up where the model has g / (1 + exp(-g)) · up."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    g = read_tap(bad, "ffn_gate", 0).astype(np.float64)
    write_tap(bad, "ffn.act", 0, g / (1 + np.exp(g)) * read_tap(bad, "ffn_up", 0))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn.act", "sign in the SiLU's exponent", "activation")


def test_an_ffn_fed_the_blocks_input_is_named(llama, tmp_path):
    """A parallel attention/FFN block's wiring in a sequential model: ffn_norm normalizes the
    block's input instead of resid.attn."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    eps = float(gguf_field(llama / "llama.gguf", "llama.attention.layer_norm_rms_epsilon"))
    w = gguf_tensor(llama / "llama.gguf", "blk.0.ffn_norm.weight")
    write_tap(bad, "ffn_norm", 0, rmsnorm(read_tap(bad, "token_embd", -1), w, eps))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn_norm", "parallel attention/FFN block", "buffer")


def test_the_norm_weight_multiplied_in_before_the_statistics_is_named(llama, tmp_path):
    """rmsnorm(x * w) for rmsnorm(x) * w: the weight applied before the mean square."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    model = llama / "llama.gguf"
    w = gguf_tensor(model, "blk.0.attn_norm.weight")
    eps = float(gguf_field(model, "llama.attention.layer_norm_rms_epsilon"))
    write_tap(bad, "attn_norm", 0, rmsnorm(read_tap(bad, "token_embd", -1) * w, 1, eps))
    diagnose(llama / "ref.h5", bad, model, "blk.0.attn_norm", "multiplied in before the mean square",
             "normalization")


def test_the_ffn_add_reading_the_layer_input_is_named(llama, tmp_path):
    """The FFN's residual add reading the stream that entered the layer instead of the attention
    block's sum: resid.ffn[l] = resid.ffn[l - 1] + ffn_down[l]. Was unexplained (gemma3 in
    llama.cpp, blind round 8)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "resid.ffn", 1, read_tap(bad, "resid.ffn", 0) + read_tap(bad, "ffn_down", 1))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.resid.ffn", "the add reads the stream entering "
             "the layer", "residual")


def test_epsilon_outside_the_square_root_is_named(llama, tmp_path):
    """RMSNorm as x / (sqrt(mean(x²)) + eps): under the threshold, found by its replay, and named
    as the placement rather than as another epsilon."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    eps = float(gguf_field(llama / "llama.gguf", "llama.attention.layer_norm_rms_epsilon"))
    x = read_tap(bad, "token_embd", -1).astype(np.float64)
    w = gguf_tensor(llama / "llama.gguf", "blk.0.attn_norm.weight")
    write_tap(bad, "attn_norm", 0, x / (np.sqrt((x * x).mean(axis=1, keepdims=True)) + eps) * w)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn_norm", r["first_divergence"]
    d = r["diagnosis"]
    assert d["class"] == "normalization" and "epsilon added outside the square root" in d["variant"], d
    below = [f["detail"] for f in r["findings"] if f["kind"] == "below-threshold"]
    assert below and "where its inputs agree exactly" in below[0], r["findings"]  # not a ratio to a zero error


def test_gemmas_offset_dropped_from_a_norm_weight_is_named(gemma2, tmp_path):
    """Gemma's GGUF stores each norm weight as 1 + w; HF-style code that multiplies by its own w
    computes x * (w_gguf - 1). Was unexplained (blind round 24, G5 and H1)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    w = gguf_tensor(gemma2 / "gemma2.gguf", "blk.0.attn_norm.weight")
    write_tap(bad, "attn_norm", 0, rmsnorm(read_tap(bad, "token_embd", -1), w - 1, 1e-6))
    diagnose(gemma2 / "ref.h5", bad, gemma2 / "gemma2.gguf", "blk.0.attn_norm", "rmsnorm(x) * (w - 1)",
             "normalization")


def test_a_post_norm_bound_to_the_ffn_norms_weight_is_named(gemma2, tmp_path):
    """Weights bound by swapped names: the post-attention norm run with the FFN's pre-norm weight.
    Was unexplained (blind round 24, G1): only the post-FFN norm's weight was tried."""
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    w = gguf_tensor(gemma2 / "gemma2.gguf", "blk.0.ffn_norm.weight")
    write_tap(bad, "attn_post_norm", 0, rmsnorm(read_tap(bad, "attn_output", 0), w, 1e-6))
    diagnose(gemma2 / "ref.h5", bad, gemma2 / "gemma2.gguf", "blk.0.attn_post_norm",
             "rmsnorm(x) * blk.0.ffn_norm.weight (another norm's weight wired in)", "weight-loading")


def test_a_norm_weight_applied_twice_is_named(llama, tmp_path):
    """Blind round 26's B78: the output norm's weight multiplied in twice."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    w = gguf_tensor(llama / "llama.gguf", "output_norm.weight")
    write_tap(bad, "output_norm", -1, rmsnorm(read_tap(bad, "resid.ffn", 1), w * w, 1e-5))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output_norm", "the weight applied twice", "normalization")


@pytest.mark.parametrize("act, words", [
    (lambda g, u: g / (1 + np.exp(-1.702 * g)) * u, "the quick GELU"),
    (lambda g, u: g / (1 + np.exp(-g)) * (u / (1 + np.exp(-u))), "the activation applied to both projections"),
])
def test_an_activation_of_another_model_or_on_both_projections_is_named(llama, tmp_path, act, words):
    """Blind round 26's B46 and B69: x·sigmoid(1.702x) for SiLU; silu(gate) · silu(up)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    g = read_tap(bad, "ffn_gate", 0).astype(np.float64)
    u = read_tap(bad, "ffn_up", 0).astype(np.float64)
    write_tap(bad, "ffn.act", 0, act(g, u))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.ffn.act", words, "activation")


def test_a_residual_add_of_the_unprojected_attention_is_named(llama, tmp_path):
    """Blind round 26's B67: the add reads attn.out, the attention before its output projection
    (the same width here), instead of attn_output."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "resid.attn", 0, read_tap(bad, "token_embd", -1) + read_tap(bad, "attn.out", 0))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.resid.attn",
             "the add reads attn.out (before the output projection) instead of attn_output", "residual", position=0)
