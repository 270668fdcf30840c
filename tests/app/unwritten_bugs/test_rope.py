"""RoPE: positions within a chunk, rotations applied twice or to V, bases rounded, frequency
factors reversed, heads left unrotated, norms after the rotation."""
import shutil

import h5py
import numpy as np

import pytest

from bug_traces import (PROMPT, run, read_tap, write_tap, traced, diff_json, gguf_tensor, rmsnorm, diagnose,
                        causal_probs, gguf_field, rounded_to)


def rope_norm(x, position, head_dim=16, base=1e4, table=np.float32):
    """The llama fixture's RoPE (adjacent pairs, every dimension rotated) of one row, its inverse
    frequencies held as `table`."""
    x = x.reshape(-1, head_dim // 2, 2).astype(np.float64)
    inv = (base ** (-2 * np.arange(head_dim // 2) / head_dim)).astype(np.float32)
    theta = position * (inv.astype(table).astype(np.float64) if table != "bf16" else rounded_to("bf16", inv))
    c, s = np.cos(theta), np.sin(theta)
    return np.stack([x[..., 0] * c - x[..., 1] * s, x[..., 0] * s + x[..., 1] * c], axis=-1).reshape(-1)


def test_rope_at_the_position_within_a_prefill_chunk_is_named(llama, tmp_path):
    """A chunked prefill that passes each chunk's positions from 0: rows rotated at p mod chunk."""
    eng = tmp_path / "chunked.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6,
            "--prefill-chunk", 4, "-o", eng)
    assert p.returncode == 0, p.stderr
    q = read_tap(eng, "attn_q", 0)
    q_rope = read_tap(eng, "attn_q.rope", 0)
    assert np.allclose(rope_norm(q[5], 5), q_rope[5], atol=1e-5), "the test's RoPE is the fixture's"
    prompt = len(PROMPT.split(","))
    for pos in range(4, prompt):
        q_rope[pos] = rope_norm(q[pos], pos % 4)
    write_tap(eng, "attn_q.rope", 0, q_rope)
    code, r = diff_json(llama / "ref.h5", eng, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("blk.0.attn_q.rope", 4)
    assert r["diagnosis"]["class"] == "rope" and "within its prefill chunk of 4" in r["diagnosis"]["variant"], \
        r["diagnosis"]


def test_rope_applied_twice_is_named(llama, tmp_path):
    """q rotated twice at p: one rotation at 2p."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, q_rope = read_tap(bad, "attn_q", 1), read_tap(bad, "attn_q.rope", 1)
    rows = np.stack([rope_norm(q[p], 2 * p) for p in range(q.shape[0])])
    write_tap(bad, "attn_q.rope", 1, rows.reshape(q_rope.shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn_q.rope", "RoPE applied twice", "rope")


def test_a_rope_base_rounded_to_bf16_is_found_and_named(llama, tmp_path):
    """llama's base 10000 stored in bf16 (9984): the rotation drifts by an nmse under the f32
    threshold at these positions. Was a PASS."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    x = read_tap(bad, "attn_q", 1).astype(np.float64)
    n, width = x.shape[0], x[0].size
    heads = x.reshape(n, -1, 16)  # head_dim 16, every dimension rotated, adjacent pairs (NORM)
    theta = np.arange(n)[:, None] * 9984.0 ** (-2 * np.arange(8) / 16)[None, :]
    a, b = heads[..., 0::2], heads[..., 1::2]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    rotated = np.empty_like(heads)
    rotated[..., 0::2], rotated[..., 1::2] = a * c - b * s, a * s + b * c
    write_tap(bad, "attn_q.rope", 1, rotated.reshape(read_tap(bad, "attn_q.rope", 1).shape))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.1.attn_q.rope", r["first_divergence"]
    d = r["diagnosis"]
    assert d["class"] == "rope" and "the base rounded to bf16 (9984)" in d["variant"], d


@pytest.mark.parametrize("table", [np.float16, "bf16"])
def test_a_frequency_table_rounded_to_16_bits_is_named(llama, tmp_path, table):
    """inv_freq = 1 / base^(2i/d) made, then cast to the activations' 16-bit dtype: every angle
    p times a rounded frequency, a drift under a few 1e-3 radians at these positions. Was
    unexplained (blind round 14, B02)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    k, k_rope = read_tap(bad, "attn_k", 0), read_tap(bad, "attn_k.rope", 0)
    assert np.allclose(rope_norm(k[3], 3), k_rope[3], atol=1e-5), "the test's RoPE is the fixture's"
    write_tap(bad, "attn_k.rope", 0, np.stack([rope_norm(k[p], p, table=table) for p in range(k.shape[0])]))
    name = "f16" if table is np.float16 else "bf16"
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_k.rope",
             f"the inverse frequencies base^(-2i/n_rot) rounded to {name}", "rope", position=1)


def test_position_ids_rounded_to_bf16_are_named(llama, tmp_path):
    """Position ids cast to bf16 before the angles: exact to 256, then odd positions rounded to
    even. A 270-token prompt, rows past 256 rotated at the rounded position. Was unexplained
    (blind round 15, X15)."""
    tokens = ",".join(str((7 * i + 1) % 320) for i in range(270))
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", llama / "llama.gguf", "--tokens", tokens, "-n", 1,
                "--layers", "0", "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    k, k_rope = read_tap(tmp_path / "eng.h5", "attn_k", 0), read_tap(tmp_path / "eng.h5", "attn_k.rope", 0)
    at = rounded_to("bf16", np.arange(k.shape[0], dtype=np.float32))
    assert at[257] == 256 and at[255] == 255
    write_tap(tmp_path / "eng.h5", "attn_k.rope", 0, np.stack([rope_norm(k[p], at[p]) for p in range(k.shape[0])]))
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", llama / "llama.gguf", "blk.0.attn_k.rope",
             "rotated at p rounded to bf16", "rope", position=257)


def test_a_position_table_indexed_modulo_its_size_is_fitted(llama, tmp_path):
    """A cos/sin cache built for 4 positions and indexed p % 4: from position 4 on every row is
    rotated at p mod 4. Was unexplained (blind round 16, W2)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q = read_tap(bad, "attn_q", 1)
    write_tap(bad, "attn_q.rope", 1, np.stack([rope_norm(q[p], p % 4) for p in range(q.shape[0])]))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.1.attn_q.rope", "rotated at p mod 4 (fitted", "rope",
             position=4)


def test_rope_on_v_is_named(llama, tmp_path):
    """A RoPE loop over {k, v} meant for {q, k}: the cached V rotated."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    v, cached = read_tap(bad, "attn_v", 0), read_tap(bad, "kv.v", 0)
    rotated = np.stack([rope_norm(v[p], p) for p in range(v.shape[0])])
    write_tap(bad, "kv.v", 0, rotated.reshape(cached.shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.kv.v", "V rotated by RoPE", "rope")


def test_qs_rope_given_ks_head_count_is_named(llama, tmp_path):
    """q's RoPE called with n_head_kv: the batch read as rows of 2 heads, head slot j of the batch
    rotated at the position of row j / 2, the slots past 2 x the batch's rows left unrotated."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, q_rope = read_tap(bad, "attn_q", 0), read_tap(bad, "attn_q.rope", 0)
    n, prompt = q.shape[0], len(PROMPT.split(","))
    heads = q.reshape(n, 4, 16).astype(np.float64)
    for p in range(n):
        start, rows = (0, prompt) if p < prompt else (p, 1)
        for h in range(4):
            row = ((p - start) * 4 + h) // 2
            if row < rows:
                heads[p, h] = rope_norm(heads[p, h], start + row)
    write_tap(bad, "attn_q.rope", 0, heads.reshape(q_rope.shape))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope", "given K's head count", "rope")


def rope_with_factors(x, position, factors, head_dim, base):
    """Adjacent pairs, pair i at angle p · base^(-2i / head_dim) / factors[i]."""
    x = x.reshape(-1, head_dim // 2, 2).astype(np.float64)
    theta = position * base ** (-2 * np.arange(head_dim // 2) / head_dim) / factors
    c, s = np.cos(theta), np.sin(theta)
    return np.stack([x[..., 0] * c - x[..., 1] * s, x[..., 0] * s + x[..., 1] * c], axis=-1).reshape(-1)


def test_rope_frequency_factors_in_reverse_order_are_named(tmp_path):
    """Llama 3.1's factors indexed from the end: pair i divided by factor n_rot/2 - 1 - i."""
    model = traced(tmp_path, "llama3", "--arch", "llama3", n=2)
    factors = gguf_tensor(model, "rope_freqs.weight")
    base = float(gguf_field(model, "llama.rope.freq_base"))
    q, q_rope = read_tap(tmp_path / "eng.h5", "attn_q", 0), read_tap(tmp_path / "eng.h5", "attn_q.rope", 0)
    head_dim = 2 * factors.size
    assert np.allclose(rope_with_factors(q[3], 3, factors, head_dim, base), q_rope[3].reshape(-1), atol=1e-5)
    rows = np.stack([rope_with_factors(q[p], p, factors[::-1], head_dim, base) for p in range(q.shape[0])])
    write_tap(tmp_path / "eng.h5", "attn_q.rope", 0, rows.reshape(q_rope.shape))
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "blk.0.attn_q.rope", "factors in reverse order",
             "rope")


@pytest.mark.parametrize("which", ["q", "k"])
def test_a_qk_norm_after_rope_is_named(tmp_path, which):
    """qwen3's q (k) norm applied after RoPE instead of before it (the two calls in the wrong
    order). K's normed row is what the cache then holds: a value passed on, not a buffer holding
    another tap's data (blind round 16, Q3: tied with that)."""
    model = traced(tmp_path, "qwen3", "--arch", "qwen3", n=2)
    eng = tmp_path / "eng.h5"
    w = gguf_tensor(model, f"blk.0.attn_{which}_norm.weight")
    base = float(gguf_field(model, "qwen3.rope.freq_base"))
    eps = float(gguf_field(model, "qwen3.attention.layer_norm_rms_epsilon"))
    d = w.size
    x, normed = read_tap(eng, f"attn_{which}", 0), read_tap(eng, f"attn_{which}_norm", 0)
    n = x.shape[0]
    heads = x.reshape(n, -1, d).astype(np.float64)
    theta = np.arange(n)[:, None] * base ** (-2 * np.arange(d // 2) / d)  # NEOX: pairs (i, i + d/2)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    a, b = heads[..., : d // 2], heads[..., d // 2:]
    rotated = np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    final = rmsnorm(rotated, w, eps).reshape(normed.shape)
    write_tap(eng, f"attn_{which}_norm", 0, final)
    if which == "k":
        write_tap(eng, "attn_k.rope", 0, final)
        write_tap(eng, "kv.k", 0, final)
    diagnose(tmp_path / "ref.h5", eng, model, f"blk.0.attn_{which}_norm", "the norm applied after RoPE",
             "normalization")


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_rope_leaving_the_last_head_unrotated_is_fitted(llama, tmp_path, precision):
    """A per-head RoPE loop over range(n_head - 1): the last head keeps its unrotated values. The
    signature says the error is in that head alone. In a bf16 run every rotated row is rounded,
    the unrotated head too (blind round 15, X01: was unexplained)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, rotated = read_tap(bad, "attn_q", 0), read_tap(bad, "attn_q.rope", 0)
    rotated[:, 48:] = q[:, 48:]
    if precision == "bf16":
        rotated = rounded_to("bfloat16", rotated)
        with h5py.File(bad, "r+") as f:
            f.attrs["precision"] = "bf16"
    write_tap(bad, "attn_q.rope", 0, rotated)
    d = diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope", "head 3 of 4 left unrotated: the "
                 "head loop stops short of the last", "rope", position=1)
    assert any(s.startswith("the error is confined to head 3 of 4") for s in d["signatures"]), d["signatures"]


def rope_neox(x, position, head_dim=16, base=1e4, scale=1.0):
    """Half-split pairs (gemma3), every dimension rotated, angles times `scale`."""
    x = x.reshape(-1, head_dim).astype(np.float64)
    half = head_dim // 2
    theta = position * scale * base ** (-2 * np.arange(half) / head_dim)
    c, s = np.cos(theta), np.sin(theta)
    a, b = x[:, :half], x[:, half:]
    return np.concatenate([a * c - b * s, a * s + b * c], axis=1).reshape(-1)


def test_gemma3s_scaling_on_its_sliding_layers_is_named(tmp_path):
    """Gemma 3 4B+ scales the global layers' RoPE by 8 (linear) and not the sliding layers': an
    engine that scales every layer rotates layer 0 (sliding, base 10000) at p / 8."""
    traced(tmp_path, "gemma3", "--arch", "gemma3", "--n-layer", "6", "--rope-scaling", "linear", n=3)
    bad = tmp_path / "eng.h5"
    x, q_rope = read_tap(bad, "attn_q_norm", 0), read_tap(bad, "attn_q.rope", 0)
    assert np.allclose(rope_neox(x[3], 3), q_rope[3], atol=1e-5), "the test's RoPE is the fixture's"
    write_tap(bad, "attn_q.rope", 0, np.stack([rope_neox(x[p], p, scale=1 / 8) for p in range(len(x))]))
    diagnose(tmp_path / "ref.h5", bad, tmp_path / "gemma3.gguf", "blk.0.attn_q.rope",
             "global layers' RoPE scaling (linear x8) applied to this sliding layer", "rope", position=1)


def test_yarn_without_its_magnitude_factor_is_named(tmp_path):
    """YaRN's angles right, cos and sin not multiplied by 1 + 0.1 ln 4: every row of q short by
    that factor, position 0 too."""
    traced(tmp_path, "llama", "--arch", "llama", "--rope-scaling", "yarn", n=3)
    bad = tmp_path / "eng.h5"
    q_rope = read_tap(bad, "attn_q.rope", 0)
    write_tap(bad, "attn_q.rope", 0, q_rope / (1 + 0.1 * np.log(4.0)))
    diagnose(tmp_path / "ref.h5", bad, tmp_path / "llama.gguf", "blk.0.attn_q.rope",
             "without its magnitude factor", "rope", position=0)


def test_yarn_over_the_trained_context_instead_of_the_original_is_named(tmp_path):
    """YaRN's correction dims computed from context_length (512) instead of
    original_context_length (128): the ramp sits over other pairs (qwen3, head_dim 32)."""
    import json
    from tapdiff_repro import rope
    model = traced(tmp_path, "qwen3", "--arch", "qwen3", "--head-dim", "32", "--rope-scaling", "yarn", n=3)
    hp = json.loads(run("inspect", "--json", model).stdout)["config"]
    bad = tmp_path / "eng.h5"
    x, q_rope = read_tap(bad, "attn_q_norm", 0), read_tap(bad, "attn_q.rope", 0)
    assert np.allclose(rope(x[3], hp["n_head"], 3, hp, 0, None), q_rope[3], atol=1e-5), "the test's RoPE is the fixture's"
    hp["rope_scaling"]["n_ctx_orig"] = hp["n_ctx_train"]
    write_tap(bad, "attn_q.rope", 0, np.stack([rope(x[p], hp["n_head"], p, hp, 0, None) for p in range(len(x))]))
    diagnose(tmp_path / "ref.h5", bad, model, "blk.0.attn_q.rope", "original context taken as context_length 512",
             "rope", position=1)


def test_gemma3s_layer_kind_test_off_by_one_is_named(tmp_path):
    """Blind round 23: layer 0 taken for a global layer (`l % 6 == 0`): rotated at the global base 1e6
    and scaled by 8."""
    traced(tmp_path, "gemma3", "--arch", "gemma3", "--n-layer", "6", "--rope-scaling", "linear", n=3)
    bad = tmp_path / "eng.h5"
    x = read_tap(bad, "attn_q_norm", 0)
    write_tap(bad, "attn_q.rope", 0, np.stack([rope_neox(x[p], p, base=1e6, scale=1 / 8) for p in range(len(x))]))
    diagnose(tmp_path / "ref.h5", bad, tmp_path / "gemma3.gguf", "blk.0.attn_q.rope", "rotated as a global layer",
             "rope", position=1)


def test_positions_divided_by_a_linear_factor_in_integers_are_named(tmp_path):
    """Blind round 23: Gemma 3's global layer rotated at p // 8: the prompt's first eight rows look
    rotated at 0, which a positions bug would explain, but not the rows after."""
    traced(tmp_path, "gemma3", "--arch", "gemma3", "--n-layer", "6", "--rope-scaling", "linear", n=8)
    bad = tmp_path / "eng.h5"
    x = read_tap(bad, "attn_q_norm", 5)
    write_tap(bad, "attn_q.rope", 5, np.stack([rope_neox(x[p], p // 8, base=1e6) for p in range(len(x))]))
    diagnose(tmp_path / "ref.h5", bad, tmp_path / "gemma3.gguf", "blk.5.attn_q.rope", "in integer arithmetic (p / 8",
             "rope", position=1)


def test_yarns_magnitude_applied_twice_is_named(tmp_path):
    """Blind round 23: cos and sin times (1 + 0.1 ln 4)², the factor fitted."""
    traced(tmp_path, "qwen3", "--arch", "qwen3", "--head-dim", "32", "--rope-scaling", "yarn", n=3)
    bad = tmp_path / "eng.h5"
    write_tap(bad, "attn_q.rope", 0, read_tap(bad, "attn_q.rope", 0) * (1 + 0.1 * np.log(4.0)))
    diagnose(tmp_path / "ref.h5", bad, tmp_path / "qwen3.gguf", "blk.0.attn_q.rope", "the magnitude applied twice",
             "rope", position=0)


def test_a_partial_rotation_of_the_heads_last_dimensions_is_named(tmp_path):
    """Phi-4-mini rotates the first 12 of each head's 16 dimensions (NEOX pairs i, i + 6): a slice
    taken from the wrong end rotates the last 12. Was unexplained (blind round 24, P2)."""
    traced(tmp_path, "phi3", "--arch", "phi3", "--rope-dim", "12")
    bad = tmp_path / "eng.h5"
    q = read_tap(bad, "attn_q", 0).astype(np.float64)
    heads = q.reshape(q.shape[0], -1, 16)
    theta = np.arange(q.shape[0])[:, None] * 1e4 ** (-2 * np.arange(6) / 12)[None, :]
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    a, b = heads[..., 4:10].copy(), heads[..., 10:16].copy()
    heads[..., 4:10], heads[..., 10:16] = a * c - b * s, b * c + a * s
    write_tap(bad, "attn_q.rope", 0, heads.reshape(read_tap(bad, "attn_q.rope", 0).shape))
    diagnose(tmp_path / "ref.h5", bad, tmp_path / "phi3.gguf", "blk.0.attn_q.rope",
             "the last 12 dimensions of each head rotated instead of the first 12", "rope")


def test_a_nope_test_off_by_one_is_named(tmp_path):
    """SmolLM3 with its NoPE test written l % 4 == 0 instead of (l + 1) % 4 == 0: layer 0 passes q
    and k through unrotated, and the diagnosis names the NoPE test, not a position bug."""
    model = traced(tmp_path, "smollm3", "--arch", "smollm3", "--n-layer", "4", n=4)
    bad = tmp_path / "eng.h5"
    for name in ("attn_q", "attn_k"):
        write_tap(bad, name + ".rope", 0, read_tap(bad, name, 0))
    diagnose(tmp_path / "ref.h5", bad, model, "blk.0.attn_q.rope", "the NoPE test wrong", "rope", position=1)


@pytest.fixture(scope="module")
def smollm3(tmp_path_factory):
    """smollm3, four layers: layer 3 has no RoPE (NoPE); base 5e6."""
    d = tmp_path_factory.mktemp("smollm3")
    return d, traced(d, "smollm3", "--arch", "smollm3", "--n-layer", "4", n=4)


def test_a_nope_layers_keys_rotated_into_the_cache_are_named(smollm3, tmp_path):
    """Blind round 26's B72: attention reads a NoPE layer's k as projected, but its cache write
    rotates it; the read-back is the rotated row."""
    d, model = smollm3
    bad = tmp_path / "eng.h5"
    shutil.copy(d / "eng.h5", bad)
    k = read_tap(bad, "attn_k", 3)
    write_tap(bad, "kv.k", 3, np.stack([rope_norm(k[p], p, base=5e6) for p in range(k.shape[0])]))
    diagnose(d / "ref.h5", bad, model, "blk.3.kv.k", "K rotated by RoPE at p into the cache", "rope", position=1)


def test_a_nope_layers_queries_scaled_are_fitted(smollm3, tmp_path):
    """Blind round 26's B86: q times 1.5 in the NoPE layer (a temperature put where RoPE is skipped)."""
    d, model = smollm3
    bad = tmp_path / "eng.h5"
    shutil.copy(d / "eng.h5", bad)
    write_tap(bad, "attn_q.rope", 3, read_tap(bad, "attn_q.rope", 3) * np.float32(1.5))
    diagnose(d / "ref.h5", bad, model, "blk.3.attn_q.rope", "q times 1.5", "attention-scale", position=0)


def test_rotated_queries_times_a_factor_tie_a_scale_with_a_rope_magnitude(llama, tmp_path):
    """Blind round 26's B80: q times 1.1 after the rotation, in a model without RoPE scaling: a scale
    of the queries and cos and sin times 1.1 are the same numbers; the class is withheld."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn_q.rope", 0, read_tap(bad, "attn_q.rope", 0) * np.float32(1.1))
    d = diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope", "q times 1.1", "unexplained",
                 evidence="tied", position=0)
    assert {t["class"] for t in d["ties"]} == {"attention-scale", "rope"}, d["ties"]


def test_a_position_counter_stuck_at_the_prompt_length_is_fitted(llama, tmp_path):
    """Blind round 26's B71: decode steps never advance the position: every one rotated at the prompt's
    length, the first of them right."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, q_rope = read_tap(bad, "attn_q", 0), read_tap(bad, "attn_q.rope", 0)
    prompt = len(PROMPT.split(","))
    for p in range(prompt + 1, q.shape[0]):
        q_rope[p] = rope_norm(q[p], prompt)
    write_tap(bad, "attn_q.rope", 0, q_rope)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope", "the position counter stops advancing at 6",
             "rope", position=prompt + 1)


def test_a_linear_scaling_the_model_does_not_declare_is_named(llama, tmp_path):
    """Blind round 26's B81: positions p / 2 (a linear RoPE scaling of 2, another model's config)
    in a model that declares none."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q = read_tap(bad, "attn_q", 0)
    write_tap(bad, "attn_q.rope", 0, np.stack([rope_norm(q[p], p / 2) for p in range(q.shape[0])]))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope",
             "rotated at p / 2: a linear RoPE scaling by 2 the model does not declare", "rope", position=1)


def test_a_qk_norm_the_model_does_not_have_is_named(llama, tmp_path):
    """Blind round 26's B65: q RMS-normalized per head (weight 1) before RoPE, qwen3's habit in a
    model without q/k norms."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q = read_tap(bad, "attn_q", 0).astype(np.float64)
    heads = q.reshape(q.shape[0], -1, 16)
    normed = (heads / np.sqrt((heads * heads).mean(axis=-1, keepdims=True) + 1e-5)).reshape(q.shape)
    write_tap(bad, "attn_q.rope", 0, np.stack([rope_norm(normed[p], p) for p in range(q.shape[0])]))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope",
             "q RMS-normalized per head (weight 1) before RoPE, though the model has no q/k norm", "normalization",
             position=0)


def rope_norm_by(x, cos_angle, sin_angle, head_dim=16):
    """The llama fixture's pairs (adjacent) of one row turned by cos of cos_angle and sin of
    sin_angle, each an array over the pairs."""
    x = x.reshape(-1, head_dim // 2, 2).astype(np.float64)
    c, s = np.cos(cos_angle), np.sin(sin_angle)
    return np.stack([x[..., 0] * c - x[..., 1] * s, x[..., 0] * s + x[..., 1] * c], axis=-1).reshape(-1)


@pytest.mark.parametrize("bug, words, position", [
    ("f16", "the angles p * base^(-2i/n_rot) rounded to f16 before cos and sin", None),
    ("sin_next", "sin taken at the next pair's angle", 1),
])
def test_an_angle_table_made_wrong_is_named(llama, tmp_path, bug, words, position):
    """Blind round 26's B59 and B60: the angles rounded to f16 before cos and sin; the sin table one
    frequency off (cos of angle i, sin of angle i + 1)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q = read_tap(bad, "attn_q", 0)
    inv = 1e4 ** (-2 * np.arange(9) / 16)
    rows = []
    for p in range(q.shape[0]):
        theta = p * inv
        if bug == "f16":
            angle = theta[:8].astype(np.float32).astype(np.float16).astype(np.float64)
            rows.append(rope_norm_by(q[p], angle, angle))
        else:
            rows.append(rope_norm_by(q[p], theta[:8], theta[1:9]))
    write_tap(bad, "attn_q.rope", 0, np.stack(rows))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_q.rope", words, "rope", position=position)


def test_keys_rotated_again_as_they_are_read_are_named(llama, tmp_path):
    """Blind round 26's B82: keys cached rotated, and rotated again by their positions as attention
    reads them."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    q, k = read_tap(bad, "attn_q.rope", 0), read_tap(bad, "attn_k.rope", 0)
    twice = np.stack([rope_norm(k[t], t) for t in range(k.shape[0])])
    keys = read_tap(bad, "attn.probs", 0).shape[2]
    write_tap(bad, "attn.probs", 0, causal_probs(q.reshape(q.shape[0], -1), twice, 4, keys, [0, 0, 1, 1]))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn.probs",
             "the cached keys rotated again by their positions as attention reads them", "rope", position=1)
