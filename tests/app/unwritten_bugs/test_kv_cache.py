"""KV cache bookkeeping: rows appended short, at the wrong stride or order, another layer's or
tensor's rows, 16-bit formats misread, views one slot late, rings of too few cells."""
import shutil

import h5py
import numpy as np
import pytest

from bug_traces import (PROMPT, run, read_tap, write_tap, traced, diff_json, causal_probs, replayed_probs,
                        diagnose, with_decode_probs)


def test_another_layers_key_in_the_cache_is_a_kv_cache_bug(llama, tmp_path):
    """Decode writes each layer's K into the next layer's cache slot: a cache indexing bug,
    not an aliased buffer."""
    bad = tmp_path / "layer-cache.h5"
    shutil.copy(llama / "eng.h5", bad)
    cached = read_tap(bad, "kv.k", 0)
    cached[6:] = read_tap(bad, "attn_k.rope", 1)[6:]
    write_tap(bad, "kv.k", 0, cached)
    code, r = diff_json(llama / "ref.h5", bad)
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.kv.k" and r["first_divergence"]["position"] == 6
    assert r["diagnosis"]["class"] == "kv-cache" and r["diagnosis"]["evidence"] == "reproduced", r["diagnosis"]
    assert "another layer's index" in r["diagnosis"]["variant"]


def test_a_prefill_that_appends_one_row_short_is_a_kv_cache_bug(llama, tmp_path):
    """The batch's last K/V row left for a decode step that never writes it: the cache slot of
    the last prompt position reads back as zeros, every other slot as computed."""
    bad = tmp_path / "short-append.h5"
    shutil.copy(llama / "eng.h5", bad)
    last = len(PROMPT.split(",")) - 1
    for name in ("kv.k", "kv.v"):
        rows = read_tap(bad, name, 0)
        rows[last] = 0
        write_tap(bad, name, 0, rows)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("blk.0.kv.k", last)
    assert r["diagnosis"]["class"] == "kv-cache" and "one row short" in r["diagnosis"]["variant"], r["diagnosis"]


@pytest.mark.parametrize("precision, misread", [
    ("bf16", lambda k: (k.view(np.uint32) >> 16).astype(np.uint16).view(np.float16).astype(np.float32)),
    ("f16", lambda k: (k.astype(np.float16).view(np.uint16).astype(np.uint32) << 16).view(np.float32))])
def test_a_16_bit_cache_read_as_the_other_format_is_named(llama, tmp_path, precision, misread):
    """K stored in the cache as bf16 and read back through an f16 view (or the other way round).
    Was unexplained."""
    bad = tmp_path / f"{precision}.h5"
    p = run("run", "--backend", "host", "--precision", precision, "-m", llama / "llama.gguf", "--tokens", PROMPT,
            "-n", 3, "-o", bad)
    assert p.returncode == 0, p.stderr
    write_tap(bad, "kv.k", 0, misread(read_tap(bad, "kv.k", 0).astype(np.float32)))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.kv.k", r["first_divergence"]
    other = "f16" if precision == "bf16" else "bf16"
    assert r["diagnosis"]["class"] == "kv-cache", r["diagnosis"]
    assert f"stored in {precision} and read back as {other}" in r["diagnosis"]["variant"], r["diagnosis"]


def test_a_cache_truncated_to_bf16_is_named(llama, tmp_path):
    """An f32 engine storing V in a bf16 cache by dropping the low 16 bits (no rounding)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    v = np.ascontiguousarray(read_tap(bad, "attn_v", 1), np.float32)
    write_tap(bad, "kv.v", 1, (v.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.kv.v", "truncated to bf16", "kv-cache")


def test_prefill_rows_cached_at_twice_the_row_stride_are_fitted(llama, tmp_path):
    """The prefill's K write with the row stride n_embd for kv_dim (twice it): prompt row t lands
    in slot 2t, the slots between stay zero; decode writes its own slot right."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    k, cached = read_tap(bad, "attn_k.rope", 0), read_tap(bad, "kv.k", 0)
    prompt = len(PROMPT.split(","))
    cached[:prompt] = 0
    cached[0:prompt:2] = k[: (prompt + 1) // 2]
    write_tap(bad, "kv.k", 0, cached)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.kv.k", "row t written at slot 2t", "kv-cache")


def decode_out_over(bad, layer, values):
    """Decode steps' attn.out of `layer` in trace `bad` recomputed as its probabilities times
    `values` (rows of 2 kv heads of 16), the prompt's rows as they were."""
    probs = read_tap(bad, "attn.probs", layer).astype(np.float64)  # (n, heads, keys)
    out = read_tap(bad, "attn.out", layer).astype(np.float64)
    n, heads = probs.shape[0], probs.shape[1]
    v = values.astype(np.float64).reshape(n, -1, 16)
    o = out.reshape(n, heads, 16)
    for p in range(len(PROMPT.split(",")), n):
        for h in range(heads):
            o[p, h] = probs[p, h, : p + 1] @ v[: p + 1, h // 2]
    write_tap(bad, "attn.out", layer, o.reshape(out.shape))


def test_decode_reading_v_from_the_k_cache_is_named(llama, tmp_path):
    """The decode kernel's V pointer copied from K's: from the first decode step on, attn.out is
    the probabilities times K."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    decode_out_over(bad, 0, read_tap(bad, "attn_k.rope", 0))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.out", "read V from the K cache", "kv-cache")


def test_decode_reading_the_layer_befores_v_cache_is_named(llama, tmp_path):
    """The decode kernel given layer l - 1's V cache (the layer index of V's pointer off by one):
    layer 1's decode steps weigh layer 0's values. Was unexplained (blind round 15, X02)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    decode_out_over(bad, 1, read_tap(bad, "attn_v", 0))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.out", "decode steps read V from layer 0's cache",
             "kv-cache", position=len(PROMPT.split(",")))


def test_layer_0_reading_the_last_layers_v_cache_is_named(llama, tmp_path):
    """Blind round 26's B47: the cache's layer index l - 1 is -1 at layer 0, which Python's negative
    index (or an unsigned one modulo the layer count) wraps to the last layer: layer 0's decode steps
    weigh layer 1's values, its row for the current step not written yet (zeros)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 0).astype(np.float64)
    out = read_tap(bad, "attn.out", 0).astype(np.float64)
    n, heads = probs.shape[0], probs.shape[1]
    v = read_tap(bad, "attn_v", 1).astype(np.float64).reshape(n, -1, 16)
    o = out.reshape(n, heads, 16)
    for p in range(len(PROMPT.split(",")), n):
        seen = v[: p + 1].copy()
        seen[p] = 0
        for h in range(heads):
            o[p, h] = probs[p, h, : p + 1] @ seen[:, h // 2]
    write_tap(bad, "attn.out", 0, o.reshape(out.shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.out",
             "decode steps read V from layer 1's cache (the layer index of the cache read off by one: -1 wrapping to "
             "the last layer)", "kv-cache", position=len(PROMPT.split(",")))


def test_prefill_rows_cached_last_first_are_fitted(llama, tmp_path):
    """A batched K append with its row index reversed: slot p holds the prompt's row P - 1 - p."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    prompt = len(PROMPT.split(","))
    cached, k = read_tap(bad, "kv.k", 0), read_tap(bad, "attn_k.rope", 0)
    cached[:prompt] = k[:prompt][::-1].reshape(cached[:prompt].shape)
    write_tap(bad, "kv.k", 0, cached)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.kv.k", "[5, 4, 3, 2, 1, 0, 6, 7", "kv-cache")


def test_v_stored_transposed_is_named(llama, tmp_path):
    """V written [kv_dim][n_ctx] (ggml's layout without flash attention) and read back row-major."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    v = read_tap(bad, "attn_v", 0)
    n, prompt = v.shape[0], len(PROMPT.split(","))
    v = v.reshape(n, -1)
    kv_dim = v.shape[1]
    with h5py.File(bad, "r") as f:
        n_ctx = int(f["dims"].attrs["n_ctx"])  # the cache's capacity: the stride of a transposed row
    cached = np.zeros_like(v)
    for p in range(n):
        memory = np.zeros(n_ctx * kv_dim, np.float32)
        for t in range(prompt if p < prompt else p + 1):  # the rows written by then
            memory[np.arange(kv_dim) * n_ctx + t] = v[t]
        cached[p] = memory[p * kv_dim:(p + 1) * kv_dim]
    write_tap(bad, "kv.v", 0, cached.reshape(read_tap(bad, "kv.v", 0).shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.kv.v", "stored transposed", "kv-cache")


def test_a_cache_view_one_slot_late_is_named(llama, tmp_path):
    """Decode steps reading the cache through a view whose offset is one row too far: key t is slot
    t + 1's row and key p a slot not written yet (zeros: a score of 0). Was unexplained (llama.cpp,
    blind round 8)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, k = read_tap(bad, "attn_q.rope", 1), read_tap(bad, "attn_k.rope", 1)
    q, k = q.reshape(q.shape[0], -1), k.reshape(k.shape[0], -1)
    probs = read_tap(bad, "attn.probs", 1)
    prompt = len(PROMPT.split(","))
    for p in range(prompt, len(q)):
        late = np.vstack([k[1:p + 1], np.zeros((1, k.shape[1]))])
        probs[p] = causal_probs(q[:p + 1], late, 4, probs.shape[2], [0, 0, 1, 1])[p]
    write_tap(bad, "attn.probs", 1, probs)
    d = diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs", "the cache view's offset one row "
                 "too far", "kv-cache", position=prompt)
    assert any("the prompt (positions 0..5) is intact" in s for s in d["signatures"]), d["signatures"]


def test_a_cache_of_too_few_cells_reused_as_a_ring_is_fitted(llama, tmp_path):
    """A cache of 4 cells on a llama layer, position t in cell t mod 4: attention sees the last 4
    keys, and probabilities recorded per cell show them in the cells' order."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    window = replayed_probs(bad, 1, window=4)
    cells = np.zeros_like(window)
    for t in range(window.shape[0]):
        cells[:, :, t % 4] += window[:, :, t]
    write_tap(bad, "attn.probs", 1, cells)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs", "a cache of 4 cells reused as a ring",
             "kv-cache", position=4)


def test_a_ring_and_a_window_tie_without_probabilities(tmp_path):
    """The same 4-cell ring in a run that records no probabilities (a fused attention kernel): the
    output is what a window of 4 keys gives, so the ring (kv-cache) and a window mask
    (attention-mask) tie, and the class is withheld with both named and the window fitted."""
    model = traced(tmp_path, "llama", "--arch", "llama", "--seed", 3, n=6, run_args=["--taps", "!*attn.probs*"])
    bad = tmp_path / "eng.h5"
    q, k, v = (read_tap(bad, tap, 1).astype(np.float64) for tap in ("attn_q.rope", "attn_k.rope", "attn_v"))
    n = q.shape[0]
    q, k, v = q.reshape(n, 4, 16), k.reshape(n, 2, 16), v.reshape(n, 2, 16)
    out = np.zeros((n, 4, 16))
    for p in range(n):
        for h in range(4):
            keys = slice(max(0, p - 3), p + 1)
            s = k[keys, h // 2] @ q[p, h] / 4.0
            e = np.exp(s - s.max())
            out[p, h] = e / e.sum() @ v[keys, h // 2]
    assert np.allclose(out[:4].reshape(4, -1), read_tap(bad, "attn.out", 1)[:4], atol=1e-5)  # the replay is right
    write_tap(bad, "attn.out", 1, out.reshape(n, -1))
    d = diagnose(tmp_path / "ref.h5", bad, model, "blk.1.attn.out", "", "unexplained", evidence="tied", position=4)
    ties = {t["class"]: t["variant"] for t in d["ties"]}
    assert "a cache of 4 cells reused as a ring" in ties["kv-cache"], d["ties"]
    assert "a sliding window of 4 keys" in ties["attention-mask"], d["ties"]


def test_slots_holding_a_repeated_tokens_row_are_read_as_their_own(tmp_path):
    """Decode steps that write the last prompt row again (a stale source pointer), with token 70
    at positions 1 and 3: layer 0's V rows there are the same row, which slot 3 holds as its own,
    not position 1's (blind round 12: a chat template's repeated tokens read as remapped slots)."""
    model = tmp_path / "llama.gguf"
    assert run("fixture", "--arch", "llama", "--type", "F32", "--seed", 3, "-o", model).returncode == 0
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", model, "--tokens", "1,70,200,70,5,91", "-n", 4, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    bad = tmp_path / "eng.h5"
    v = read_tap(bad, "kv.v", 0)
    v[6:] = read_tap(bad, "attn_v", 0)[5]
    write_tap(bad, "kv.v", 0, v)
    diagnose(tmp_path / "ref.h5", bad, model, "blk.0.kv.v", "slots 0.. hold the rows of positions [0, 1, 2, 3, 4, "
                 "5, 5, 5", "kv-cache", position=6)


def test_the_fused_output_breaks_a_tie_the_probabilities_leave(llama, tmp_path):
    """A cache whose length never advances writes each decode step's row into slot 0 and shows that
    slot alone: one-hot weights on key 0, as a mask built without the cache's length gives. attn.out,
    from the same kernel, is the current row's value, not the first prompt token's: kv-cache."""
    bad = tmp_path / "stuck.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6,
            "--inject", "kv-stuck-length", "-o", bad)
    assert p.returncode == 0, p.stderr
    d = diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs", "slot 0 overwritten by each decode "
                 "step", "kv-cache", position=len(PROMPT.split(",")))
    assert any("rules out" in s and "(every attention-mask one)" in s for s in d["signatures"]), d["signatures"]


def test_a_decode_read_before_its_own_append_ties_with_a_mask_one_short(llama, tmp_path):
    """Decode steps attending over K[:p] (the slice taken before the step's append), the prompt
    right: the same weights as a mask bound one short, which a decode step without a mask cannot
    have. Was named attention-mask (blind round 13)."""
    bad, prompt = with_decode_probs(llama, tmp_path, 0, own_key=False)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("blk.0.attn.probs", prompt)
    d = r["diagnosis"]
    assert d["class"] == "unexplained" and d["evidence"] == "tied", d
    assert any(t["class"] == "kv-cache" and "sliced to its length before its own append" in t["variant"]
               for t in d["ties"]), d["ties"]
    assert any(t["class"] == "attention-mask" and "keys 0..p-1" in t["variant"] for t in d["ties"]), d["ties"]


def test_decode_rows_written_a_slot_early_are_named(llama, tmp_path):
    """Each decode step writes its K and V at slot p - 1 (the length read before its increment),
    over the previous position's row, and attends over slots 0..p, slot p never written. Was
    unexplained (blind round 14)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, k = read_tap(bad, "attn_q.rope", 1), read_tap(bad, "attn_k.rope", 1)
    q, k = q.reshape(len(q), -1), k.reshape(len(k), -1)
    probs = read_tap(bad, "attn.probs", 1)
    prompt = len(PROMPT.split(","))
    for p in range(prompt, len(q)):
        held = k[:p + 1].copy()
        held[prompt - 1:p] = k[prompt:p + 1]
        held[p] = 0
        probs[p] = causal_probs(q[:p + 1], held, 4, probs.shape[2], [0, 0, 1, 1])[p]
    write_tap(bad, "attn.probs", 1, probs)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs", "a slot early in decode", "kv-cache",
             position=prompt)



def test_f16_bits_written_into_a_bf16_cache_are_named(llama, tmp_path):
    """A bf16 run whose K append writes k.half() into the bf16 cache: the f16 bits read as bf16.
    Was unexplained (blind round 17, A10)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    k = read_tap(bad, "attn_k.rope", 0).astype(np.float32)
    bits = k.astype(np.float16).view(np.uint16).astype(np.uint32) << 16
    write_tap(bad, "kv.k", 0, bits.view(np.float32).reshape(read_tap(bad, "kv.k", 0).shape))
    with h5py.File(bad, "r+") as f:
        f.attrs["precision"] = "bf16"
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.kv.k", "the row's f16 bits written into the bf16 cache",
             "kv-cache")


def test_a_v_cache_written_a_slot_early_with_k_right_is_named(llama, tmp_path):
    """Decode steps write V's row over the previous position's slot while K's goes where it
    belongs (two write calls, one offset wrong): attention's weights are right, its output reads
    V rows a slot off. Was unexplained, the closest variant moving both caches (blind round 19)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    prompt, layer, kv_of_head = len(PROMPT.split(",")), 1, [0, 0, 1, 1]
    probs, out = read_tap(bad, "attn.probs", layer).astype(np.float64), read_tap(bad, "attn.out", layer)
    n = probs.shape[0]
    v = read_tap(bad, "attn_v", layer).reshape(n, -1).astype(np.float64)
    out = out.reshape(n, -1)
    d = v.shape[1] // 2
    for p in range(prompt, n):
        cache = np.zeros_like(v)
        cache[:prompt] = v[:prompt]
        for step in range(prompt, p + 1):
            cache[step - 1] = v[step]
        for h, g in enumerate(kv_of_head):
            out[p, h * d:(h + 1) * d] = probs[p, h, :p + 1] @ cache[:p + 1, g * d:(g + 1) * d]
    write_tap(bad, "attn.out", layer, out)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", f"blk.{layer}.attn.out",
             "V cache rows written a slot early in decode", "kv-cache", position=prompt)


def test_every_step_reading_the_layer_befores_cache_is_named(llama, tmp_path):
    """Layer 1's attention reads K and V from layer 0's cache in the prompt's batch too (the read's
    layer index off by one, each layer writing its own): blind round 21, unexplained."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 1)
    k = read_tap(bad, "attn_k.rope", 0)
    q = read_tap(bad, "attn_q.rope", 1)
    write_tap(bad, "attn.probs", 1, causal_probs(q.reshape(q.shape[0], -1), k.reshape(k.shape[0], -1), 4,
                                                 probs.shape[2], [0, 0, 1, 1]))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn.probs",
             "every step reads K and V from layer 0's cache, the prompt's batch too", "kv-cache")


def test_keys_scaled_as_they_are_cached_are_named(llama, tmp_path):
    """Blind round 27: the attention's scale (1/4 here) folded into K as it is cached."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "kv.k", 0, read_tap(bad, "attn_k.rope", 0) * np.float32(0.25))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.kv.k", "K times the attention scale 0.25 as it is cached",
             "attention-scale", position=0)


def test_decode_reading_the_slots_last_to_first_is_named(llama, tmp_path):
    """Blind round 26's B87: a decode step reads the cache's slots last to first, K and V alike: its
    output is right, its probabilities by slot reversed."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 0)
    prompt = len(PROMPT.split(","))
    for p in range(prompt, probs.shape[0]):
        probs[p, :, : p + 1] = probs[p, :, p::-1]
    write_tap(bad, "attn.probs", 0, probs)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs",
             "decode steps read the cache's slots last to first", "kv-cache", position=prompt)
