"""Attention: masks and windows nobody listed, softmax variants, head maps and head slots, scales
and caps in the wrong place."""
import shutil

import h5py
import numpy as np
import pytest

from bug_traces import (PROMPT, run, read_tap, write_tap, traced, diff_json, rounded_to, causal_probs,
                        replayed_probs, gguf_tensor, diagnose, with_decode_probs)


@pytest.mark.parametrize("order, words", [([1, 0, 3, 2], "adjacent heads swapped"), ([1, 2, 3, 0], "shifted by 1")])
def test_heads_in_other_slots_are_fitted(llama, tmp_path, order, words):
    """An attention kernel that writes each head's probabilities to another head's slot (pairs
    swapped, an index off by one): no named variant places the heads so; the placement is fitted.
    Was unexplained."""
    bad = tmp_path / "heads.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 0)
    assert probs.shape[1] == len(order), probs.shape
    write_tap(bad, "attn.probs", 0, probs[:, order, :])
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn.probs", r["first_divergence"]
    assert r["diagnosis"]["class"] == "buffer" and words in r["diagnosis"]["variant"], r["diagnosis"]
    assert str(order) in r["diagnosis"]["variant"], r["diagnosis"]


def test_a_kv_head_map_nobody_listed_is_fitted(llama, tmp_path):
    """Query heads that read their kv heads through a mapping no named variant has (the groups
    in reverse): each query head's kv head is fitted. Was unexplained."""
    bad = tmp_path / "kv-map.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 0)
    q, k = read_tap(bad, "attn_q.rope", 0), read_tap(bad, "attn_k.rope", 0)
    n_head, n_keys = probs.shape[1], probs.shape[2]
    n_kv = k.reshape(k.shape[0], -1).shape[1] // (q.reshape(q.shape[0], -1).shape[1] // n_head)
    assert (n_head, n_kv) == (4, 2)
    q, k = q.reshape(q.shape[0], -1), k.reshape(k.shape[0], -1)
    grouped = [h // (n_head // n_kv) for h in range(n_head)]
    assert np.allclose(causal_probs(q, k, n_head, n_keys, grouped), probs, atol=1e-5)  # the replay is right
    write_tap(bad, "attn.probs", 0, causal_probs(q, k, n_head, n_keys, [1, 1, 0, 0]))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn.probs", r["first_divergence"]
    assert r["diagnosis"]["class"] == "gqa-mapping" and "[1, 1, 0, 0]" in r["diagnosis"]["variant"], r["diagnosis"]


def test_v_widened_to_the_query_heads_element_by_element_is_named(llama, tmp_path):
    """GQA's V expanded with np.repeat on the flattened (n_kv * head_dim) row, each element twice,
    instead of each kv head twice: query head h's element e is V's element (16 h + e) / 2. Was
    unexplained (blind round 11)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs, v = read_tap(bad, "attn.probs", 1).astype(np.float64), read_tap(bad, "attn_v", 1).astype(np.float64)
    widened = np.repeat(v.reshape(len(v), -1), 2, axis=1).reshape(len(v), 4, 16)
    out = np.einsum("phk,khe->phe", probs[:, :, :len(v)], widened)
    write_tap(bad, "attn.out", 1, out.reshape(len(out), -1))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.out", "V widened to the query heads element by "
             "element", "gqa-mapping")


def test_a_quiet_softmax_is_named(llama, tmp_path):
    """exp(s) / (1 + sum exp(s)), the "off-by-one" softmax some engines adopt: no row sums to 1.
    Was unexplained."""
    bad = tmp_path / "quiet.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, quiet=True))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.1.attn.probs", r["first_divergence"]
    assert r["diagnosis"]["class"] == "softmax" and "quiet" in r["diagnosis"]["variant"], r["diagnosis"]


def test_a_window_one_key_wider_is_named_in_decode_steps_too(tmp_path):
    """gemma2's sliding layer admitting q - k <= window (5 keys) for < window (4), in the prompt and
    in decode steps. The named variant reproduced the prompt's rows only (it measured decode
    steps' windows from position 0), so a fitted mask won and listed it as a false lead (blind
    round 18)."""
    model = traced(tmp_path, "gemma2", "--arch", "gemma2", n=4)
    bad = tmp_path / "eng.h5"
    capped = lambda x, d: np.tanh(x / np.sqrt(d))
    assert np.allclose(replayed_probs(bad, 0, scores=capped, window=4), read_tap(bad, "attn.probs", 0), atol=1e-5)
    write_tap(bad, "attn.probs", 0, replayed_probs(bad, 0, scores=capped, window=5))
    diagnose(tmp_path / "ref.h5", bad, model, "blk.0.attn.probs", "a window of 5 keys instead of 4",
             "attention-mask", position=4)


def test_a_softcap_applied_after_the_mask_is_named(tmp_path):
    """gemma2's scores masked to -inf, then capped: each later key of the prompt's batch scores
    -cap (here -1), not -inf, and keeps a share of the softmax. Was unexplained (blind round 19)."""
    model = traced(tmp_path, "gemma2", "--arch", "gemma2", n=3)
    bad = tmp_path / "eng.h5"
    probs = read_tap(bad, "attn.probs", 1).astype(np.float64)  # layer 1 attends to every key, capped at 1
    n, d = probs.shape[0], read_tap(bad, "attn_q.rope", 1).size // (probs.shape[0] * 4)
    q = read_tap(bad, "attn_q.rope", 1).reshape(n, 4, d).astype(np.float64)
    k = read_tap(bad, "attn_k.rope", 1).reshape(n, 2, d).astype(np.float64)
    prompt = len(PROMPT.split(","))
    for p in range(prompt - 1):
        for h in range(4):
            s = np.tanh(k[:prompt, h // 2] @ q[p, h] / np.sqrt(d))
            s[p + 1:] = -1.0
            e = np.exp(s - s.max())
            probs[p, h] = 0
            probs[p, h, :prompt] = e / e.sum()
    write_tap(bad, "attn.probs", 1, probs)
    diagnose(tmp_path / "ref.h5", bad, model, "blk.1.attn.probs", "the soft-cap applied after the mask", "softcap",
             position=0)


def test_a_softcap_before_the_scale_is_named(tmp_path):
    """gemma2's scores capped as c·tanh(q·k / c) and scaled after, where the model scales first.
    Was unexplained."""
    model = traced(tmp_path, "gemma2", "--arch", "gemma2", n=3)
    bad = tmp_path / "eng.h5"
    assert np.allclose(replayed_probs(bad, 1, scores=lambda x, d: np.tanh(x / np.sqrt(d))),
                       read_tap(bad, "attn.probs", 1), atol=1e-5)  # layer 1 attends to every key, capped at 1
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, scores=lambda x, d: np.tanh(x) / np.sqrt(d)))
    code, r = diff_json(tmp_path / "ref.h5", bad, "--model", model)
    assert code == 1 and r["first_divergence"]["tap"] == "blk.1.attn.probs", r["first_divergence"]
    assert r["diagnosis"]["class"] == "softcap" and "before the 1/sqrt(d) scale" in r["diagnosis"]["variant"], \
        r["diagnosis"]


def test_a_sliding_window_nobody_configured_is_fitted(llama, tmp_path):
    """An engine that slides a window of 3 keys over a llama layer (a Mistral code path, a window
    read from a default): the window is read off the keys left at zero. A cache of 3 cells reused
    as a ring gives the same numbers where its kernel records keys by position (blind round 16, S1:
    a paged cache sized one page short, called attention-mask): the two tie, and no rerun
    separates them."""
    bad = tmp_path / "window.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, window=3))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.1.attn.probs", r["first_divergence"]
    assert r["first_divergence"]["position"] == 3, r["first_divergence"]
    d = r["diagnosis"]
    assert (d["class"], d["evidence"]) == ("unexplained", "tied"), d
    ties = [(t["class"], t["variant"]) for t in d["ties"]]
    assert any(c == "attention-mask" and "a sliding window of 3 keys on a layer that attends" in v for c, v in ties), ties
    assert any(c == "kv-cache" and "a cache of 3 cells reused as a ring, the probabilities recorded by key" in v
               for c, v in ties), ties
    assert d["separating_experiment"].startswith("no rerun separates them"), d["separating_experiment"]


def layer_1_attention(llama, tmp_path):
    """A copy of the llama fixture's engine trace, and its layer-1 attn.probs, q and K per head."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 1).astype(np.float64)
    q = read_tap(bad, "attn_q.rope", 1).reshape(probs.shape[0], 4, 16).astype(np.float64)
    k = read_tap(bad, "attn_k.rope", 1).reshape(probs.shape[0], 2, 16).astype(np.float64)
    return bad, probs, q, k


def test_a_causal_mask_filled_with_zero_is_named(llama, tmp_path):
    """The prefill's mask writing 0 into the later keys' scores instead of -inf."""
    bad, probs, q, k = layer_1_attention(llama, tmp_path)
    prompt = len(PROMPT.split(","))
    for p in range(prompt - 1):
        for h in range(4):
            s = k[:prompt, h // 2] @ q[p, h] / 4
            s[p + 1:] = 0
            e = np.exp(s - s.max())
            probs[p, h] = 0
            probs[p, h, :prompt] = e / e.sum()
    write_tap(bad, "attn.probs", 1, probs)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs", "the causal mask's fill value written as 0",
             "attention-mask")


def test_a_head_left_unwritten_in_decode_is_fitted(llama, tmp_path):
    """A decode kernel's grid one block short: head 3 of attn.out never written in a decode step,
    so it keeps what the prefill left in the buffer's row 0."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    out = read_tap(bad, "attn.out", 0)
    out[len(PROMPT.split(",")):, 48:64] = out[0, 48:64]
    write_tap(bad, "attn.out", 0, out)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.out", "head 3 only) not written in the step",
             "buffer")


def test_a_softmax_sum_over_other_terms_points_at_the_softmax(llama, tmp_path):
    """The softmax's denominator leaves out the first key: every head's row the right one divided by
    1 - its first probability, a factor of its own (position 0, one key, left alone)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 0).astype(np.float64)
    probs[1:] /= 1 - probs[1:, :, :1]
    write_tap(bad, "attn.probs", 0, probs)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs", "a factor of its own", "softmax",
             "indicated", position=1)


def test_a_causal_mask_without_its_diagonal_is_named(llama, tmp_path):
    """Keys t < p instead of t <= p: position 0 sees no key and its row stays zero."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn.probs", 0, replayed_probs(bad, 0, own_key=False))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs", "excludes the diagonal",
             "attention-mask")


def test_the_head_reading_the_batchs_first_row_is_named(llama, tmp_path):
    """The prompt's logits from row 0 of the batch: a head written for one-token steps."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    from gguf import GGUFReader
    names = {t.name for t in GGUFReader(llama / "llama.gguf").tensors}
    head = gguf_tensor(llama / "llama.gguf", "output.weight" if "output.weight" in names else "token_embd.weight")
    logits = read_tap(bad, "output", -1)  # from the last prompt position on
    logits[0] = head @ read_tap(bad, "output_norm", -1)[0]
    write_tap(bad, "output", -1, logits)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output", "its batch's first row", "buffer")


def test_q_prescaled_for_a_fused_kernel_is_named(llama, tmp_path):
    """q scaled by 1/sqrt(head_dim) after RoPE, as a fused kernel expects, in an engine whose
    attention scales the scores again."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn_q.rope", 0, read_tap(bad, "attn_q.rope", 0) / 4.0)  # head_dim 16
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope", "q pre-scaled", "attention-scale")


def probs_over(q, k, n_head, n_keys, kv_of_head, seen):
    """softmax(q_h · K_g / sqrt(d)) over the keys seen(p) = (first, end) of each position."""
    n, d = q.shape[0], q.shape[1] // n_head
    q, k = q.reshape(n, n_head, d).astype(np.float64), k.reshape(k.shape[0], -1, d).astype(np.float64)
    probs = np.zeros((n, n_head, n_keys))
    for p in range(n):
        first, end = seen(p)
        for h in range(n_head):
            s = k[first:end, kv_of_head[h]] @ q[p, h] / np.sqrt(d)
            e = np.exp(s - s.max())
            probs[p, h, first:end] = e / e.sum()
    return probs


def test_a_mask_nobody_listed_is_fitted_from_the_zeros(llama, tmp_path):
    """A chunked prefill whose second chunk sees only the first chunk's keys (its key count the
    batch's): the keys each position sees are read off the probabilities' zeros."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, k = read_tap(bad, "attn_q.rope", 0), read_tap(bad, "attn_k.rope", 0)
    keys = read_tap(bad, "attn.probs", 0).shape[2]
    seen = lambda p: (0, 2) if 2 <= p < 6 else (0, p + 1)
    write_tap(bad, "attn.probs", 0, probs_over(q.reshape(q.shape[0], -1), k.reshape(k.shape[0], -1), 4, keys,
                                                [0, 0, 1, 1], seen))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs",
             "position 2 sees keys 0..1, position 3 sees keys 0..1", "attention-mask")


def attention_parts(trace, layer=0, head_dim=16):
    probs = read_tap(trace, "attn.probs", layer).astype(np.float64)  # (n, heads, keys)
    v = read_tap(trace, "attn_v", layer).astype(np.float64)
    out = read_tap(trace, "attn.out", layer)
    return probs, v.reshape(v.shape[0], -1, head_dim), out


def test_an_attention_output_not_divided_by_the_softmax_sum_is_named(llama, tmp_path):
    """An online softmax's epilogue that never divides by its running sum: each head's output
    times Σ exp(s - max) = 1 / its largest probability."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs, _, out = attention_parts(bad)
    o = out.reshape(out.shape[0], 4, 16).astype(np.float64) / probs.max(axis=2)[:, :, None]
    write_tap(bad, "attn.out", 0, o.reshape(out.shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.out", "not divided by the softmax's sum",
             "softmax")


def test_v_gathered_from_kv_head_0_is_named(llama, tmp_path):
    """V read without its kv head's offset: the probabilities right, every head's output from kv head 0."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs, v, out = attention_parts(bad)
    o = np.stack([np.stack([probs[p, h, : p + 1] @ v[: p + 1, 0] for h in range(4)]) for p in range(out.shape[0])])
    write_tap(bad, "attn.out", 0, o.reshape(out.shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.out", "reads V from kv head 0 (K from its own",
             "gqa-mapping")


def test_probabilities_in_f16_tie_with_a_half_softmax_where_the_scores_do_not_tell(llama, tmp_path):
    """Probabilities kept in half precision for P·V, on a fixture whose scores are too small for
    their own rounding to f16 to change a probability: a softmax run in half precision predicts
    the same values, so the two tie and the class is withheld (test_a_softmax_in_half_precision
    has a prompt where they part)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn.probs", 0, rounded_to("float16", read_tap(bad, "attn.probs", 0)))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    d = r["diagnosis"]
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn.probs", r["first_divergence"]
    assert d["class"] == "unexplained" and d["evidence"] == "tied", d
    assert {t["class"] for t in d["ties"]} == {"buffer", "softmax"}, d["ties"]


def test_a_softmax_in_half_precision_is_named(tmp_path):
    """An f32 run whose attention softmax runs on a half tensor (torch's softmax(scores.half())):
    scores and probabilities rounded to f16. Where the scores are large enough for their rounding
    to show (this qwen2 fixture and prompt), rounding the probabilities alone comes close but does
    not reproduce it; where they are not (the llama fixture), the two tie and the class is withheld.
    Was unexplained (transformers, blind round 8)."""
    model = tmp_path / "qwen2.gguf"
    assert run("fixture", "--arch", "qwen2", "--type", "Q8_0", "--seed", 2, "-o", model).returncode == 0
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", model, "--tokens", "1,70,200,33,5,91,17,44", "-n", 5,
                "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    bad = tmp_path / "eng.h5"
    clean = read_tap(bad, "attn.probs", 1)
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, half=True))
    d = diagnose(tmp_path / "ref.h5", bad, model, "blk.1.attn.probs", "the softmax run in 16-bit floats", "softmax")
    assert "the output kept in a 16-bit buffer" in d["runners_up"][0]["variant"], d["runners_up"]
    # The probabilities alone kept in f16 (the scores not rounded) are the buffer, here told apart.
    write_tap(bad, "attn.probs", 1, rounded_to("float16", clean))
    diagnose(tmp_path / "ref.h5", bad, model, "blk.1.attn.probs", "rounded to f16", "buffer")
    # ... and a softmax of a bf16 tensor (was unexplained: transformers, blind round 12).
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, half="bfloat16"))
    diagnose(tmp_path / "ref.h5", bad, model, "blk.1.attn.probs", "the softmax run in bf16", "softmax")


def test_an_online_softmax_sum_not_rescaled_is_named(llama, tmp_path):
    """A flash-attention loop that rescales its output accumulator when the running max grows but
    not its running sum: S = Σ exp(s_t - M_t), M_t the max up to key t; each head's output is the
    right one times Z / S."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, k = (read_tap(bad, tap, 0).astype(np.float64) for tap in ("attn_q.rope", "attn_k.rope"))
    out = read_tap(bad, "attn.out", 0).astype(np.float64)
    n = q.shape[0]
    q, k, out = q.reshape(n, 4, 16), k.reshape(n, 2, 16), out.reshape(n, 4, 16)
    for p in range(n):
        for h in range(4):
            s = k[: p + 1, h // 2] @ q[p, h] / 4.0
            running = np.maximum.accumulate(s)
            out[p, h] *= np.exp(s - s.max()).sum() / np.exp(s - running).sum()
    write_tap(bad, "attn.out", 0, out.reshape(n, -1))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.out", "running sum is not rescaled", "softmax")


def test_a_softmax_denominator_summed_in_bf16_over_a_long_prompt_is_named(llama, tmp_path):
    """A bf16 engine's softmax kernel adding each exp(s - max) into a bf16 sum, key by key: past a
    few hundred keys small terms stop counting. It shows only at late positions, whose rows are
    spread thin: each row's residual counts relative to its own size, not pooled with position 0's
    one-hot row (blind round 15, X18: was unexplained)."""
    tokens = ",".join(str((7 * i + 1) % 320) for i in range(300))
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", llama / "llama.gguf", "--tokens", tokens, "-n", 1, "--layers", "0",
                "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    bad = tmp_path / "eng.h5"
    q = read_tap(bad, "attn_q.rope", 0).astype(np.float64).reshape(-1, 4, 16)
    k = read_tap(bad, "attn_k.rope", 0).astype(np.float64).reshape(-1, 2, 16)
    probs = read_tap(bad, "attn.probs", 0)
    for p in range(probs.shape[0]):
        for h in range(4):
            e = np.exp((k[: p + 1, h // 2] @ q[p, h]) / 4.0)
            e /= e.max()
            total = np.float64(0)
            for term in rounded_to("bfloat16", e):
                total = rounded_to("bfloat16", np.float32(total + term))[()]
            probs[p, h, : p + 1] = e / total
    write_tap(bad, "attn.probs", 0, probs)
    with h5py.File(bad, "r+") as f:
        f.attrs["precision"] = "bf16"
    diagnose(tmp_path / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs",
             "the softmax's denominator accumulated key by key in bf16", "softmax")


def test_exponentials_kept_in_f16_in_decode_only_are_named(llama, tmp_path):
    """A decode kernel that keeps exp(s - max) in a half buffer before summing in f32: a few times
    the threshold, the prompt's rows (the prefill kernel's) exact."""
    bad, prompt = with_decode_probs(llama, tmp_path, 0, half_exp=True)
    d = diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs", "exp(s - max) kept in f16",
                 "softmax", position=prompt)
    assert any("in decode steps only" in t["variant"] for t in d["ties"] + [d]), d  # the rows it replays tie


def softmax_over(q, k, first, end, scale, n_keys):
    """Each head's probabilities over keys first..end-1 of K (the llama fixture's 4 heads on 2 kv
    heads, head_dim 16) at one query row, the scores times scale, in a row of n_keys."""
    q, k = q.reshape(4, 16).astype(np.float64), k.reshape(len(k), 2, 16).astype(np.float64)
    probs = np.zeros((4, n_keys))
    for h in range(4):
        s = scale * (k[first:end, h // 2] @ q[h])
        probs[h, first:end] = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    return probs


def test_a_decode_mask_without_the_cache_length_ties_with_a_cache_read_over_one_key(llama, tmp_path):
    """A decode kernel that builds its causal mask from the query's row in the step (0) without
    the cache's length: every decode step sees key 0 only. The probabilities cannot tell it from a
    cache read over one slot. Was named kv-cache, a cache whose length never advances (blind round
    11)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 1)
    prompt = len(PROMPT.split(","))
    probs[prompt:] = 0
    probs[prompt:, :, 0] = 1
    write_tap(bad, "attn.probs", 1, probs)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("blk.1.attn.probs", prompt)
    d = r["diagnosis"]
    assert d["class"] == "unexplained" and d["evidence"] == "tied", d
    ties = {t["class"] for t in d["ties"]}
    assert {"attention-mask", "kv-cache"} <= ties, d["ties"]
    assert any("without the cache's length" in t["variant"] for t in d["ties"]), d["ties"]


def test_a_prefill_chunk_over_its_own_keys_ties_with_a_mask_hiding_the_cached_ones(llama, tmp_path):
    """Prefill in chunks of 3 whose second chunk attends over its own K/V only, as if the cache
    were empty (or whose mask hides the keys the first chunk cached). Was named attention-mask by
    the mask fitted to the zeros (blind round 11)."""
    bad = tmp_path / "chunked.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6,
            "--prefill-chunk", 3, "-o", bad)
    assert p.returncode == 0, p.stderr
    assert diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")[0] == 0
    q, k = read_tap(bad, "attn_q.rope", 1), read_tap(bad, "attn_k.rope", 1)
    q, k = q.reshape(len(q), -1), k.reshape(len(k), -1)
    probs = read_tap(bad, "attn.probs", 1)
    for pos in range(3, len(PROMPT.split(","))):
        probs[pos] = softmax_over(q[pos], k, 3, pos + 1, 0.25, probs.shape[2])
    write_tap(bad, "attn.probs", 1, probs)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("blk.1.attn.probs", 3)
    d = r["diagnosis"]
    assert d["class"] == "unexplained" and d["evidence"] == "tied", d
    ties = {t["class"]: t["variant"] for t in d["ties"]}
    assert "attends over its own K/V only" in ties["kv-cache"], d["ties"]
    assert "hides the keys earlier prefill chunks cached" in ties["attention-mask"], d["ties"]


def test_a_decode_only_scale_nobody_listed_is_fitted(llama, tmp_path):
    """The decode kernel's scores scaled by 0.6 / sqrt(head_dim), the prompt's kernel right: fitted
    at the first decode step. Was unexplained (blind round 11)."""
    bad, prompt = with_decode_probs(llama, tmp_path, 1, scores=lambda dots, d: 0.6 * dots / np.sqrt(d))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs", "decode steps' scores scaled by 0.15 "
                 "= 0.6 x 1/sqrt(head_dim), the prompt's right", "attention-scale", position=prompt)


def test_a_scale_from_the_caches_row_width_over_the_query_heads_is_named(llama, tmp_path):
    """head_dim taken as the K cache's row width over the query heads (32 / 4 = 8 where it is 16)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, scores=lambda dots, d: dots / np.sqrt(8)))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs",
             "scores scaled by 1/sqrt(kv_dim / n_head) = 1/sqrt(8)", "attention-scale")


def test_a_scale_from_the_default_head_width_names_every_equal_dimension(tmp_path):
    """head_dim taken as n_embd / n_head, a config's default, where the model sets key_length
    (blind round 18: qwen3 scaled by 1/sqrt(64) for 1/sqrt(128)). Here head_dim 32 makes
    kv_dim / n_head 16 too: the trace cannot tell the two apart, so both are named."""
    model = traced(tmp_path, "wide", "--arch", "llama", "--type", "F32", "--head-dim", 32)
    bad = tmp_path / "eng.h5"
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, scores=lambda dots, d: dots / np.sqrt(16)))
    diagnose(tmp_path / "ref.h5", bad, model, "blk.1.attn.probs",
             "scores scaled by 1/sqrt(n_embd / n_head or kv_dim / n_head) = 1/sqrt(16)", "attention-scale")


def test_one_head_without_the_causal_mask_is_named(llama, tmp_path):
    """The prefill's last head sees every prompt key, the other heads are masked (blind round 21:
    unexplained, "the error is confined to head 3 of 4")."""
    bad, probs, q, k = layer_1_attention(llama, tmp_path)
    prompt = len(PROMPT.split(","))
    for p in range(prompt):
        s = k[:prompt, 1] @ q[p, 3] / 4
        e = np.exp(s - s.max())
        probs[p, 3] = 0
        probs[p, 3, :prompt] = e / e.sum()
    write_tap(bad, "attn.probs", 1, probs)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs", "head 3 alone without the causal mask",
             "attention-mask")
