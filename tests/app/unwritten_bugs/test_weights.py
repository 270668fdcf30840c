"""Weights, biases and the embedding: block decoders nobody listed, tables and rows read off,
another layer's or projection's tensors, biases on part of a row."""
import shutil

import h5py
import numpy as np
import pytest

from bug_traces import PROMPT, K_SHAPE, run, read_tap, write_tap, traced, diff_json, gguf_tensor, diagnose, rmsnorm


def test_an_embedding_scale_nobody_listed_is_fitted(tmp_path):
    """gemma2's sqrt(n_embd) taken in integers: 9 for n_embd 96, where the model says 9.798."""
    model = traced(tmp_path, "gemma2", "--arch", "gemma2", "--n-embd", 96, n=2)
    rows = read_tap(tmp_path / "eng.h5", "token_embd", -1).astype(np.float64)
    write_tap(tmp_path / "eng.h5", "token_embd", -1, rows * 9 / np.sqrt(96))
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("token_embd", 0)
    assert r["diagnosis"]["class"] == "embedding" and "floor(sqrt(n_embd))" in r["diagnosis"]["variant"], \
        r["diagnosis"]


def q4_0_rows(model, tokens, offset=8, order="ggml"):
    """The token_embd rows of `tokens` as a Q4_0 decoder decodes them, with the zero point `offset`
    (ggml's is 8) and the nibbles of byte j in `order`: "ggml" elements j and j + 16, "interleaved"
    2j and 2j + 1, "reversed" 15 - j and 31 - j."""
    import gguf
    table = next(t for t in gguf.GGUFReader(model).tensors if t.name == "token_embd.weight")
    assert table.tensor_type == gguf.GGMLQuantizationType.Q4_0
    blocks = np.asarray(table.data).reshape(-1, table.data.shape[-1] // 18, 18)[np.asarray(tokens)]
    d = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    low, high = (blocks[..., 2:] & 0x0F).astype(np.float32), (blocks[..., 2:] >> 4).astype(np.float32)
    if order == "reversed":
        low, high = low[..., ::-1], high[..., ::-1]
    q = np.stack([low, high], -1).reshape(*low.shape[:-1], 32) if order == "interleaved" else np.concatenate([low, high], -1)
    return ((q - offset) * d).reshape(len(tokens), -1)


@pytest.mark.parametrize("weights", [False, True])
@pytest.mark.parametrize("offset, order, words, evidence", [
    (0, "ggml", "shifted by 8 quantization steps", "indicated"),
    (8, "reversed", "its own correct values in another order", "indicated"),
    (8, "interleaved", "Q4_0 nibbles unpacked interleaved", "reproduced"),
])
def test_a_block_decoder_nobody_listed_is_read_off_the_blocks(tmp_path, offset, order, words, evidence, weights):
    """A Q4_0 decoder without its zero point, and one that unpacks the nibbles in an order nobody
    listed, read an embedding table: its rows (and, recorded with --weights, the table) differ block
    by block in a shape only a decoder leaves. Nibbles unpacked interleaved are a listed decoder."""
    model = traced(tmp_path, "q4_0", "--arch", "llama", "--type", "Q4_0", run_args=["--weights", "full"] if weights else [])
    rows = read_tap(tmp_path / "eng.h5", "token_embd", -1)
    with h5py.File(tmp_path / "eng.h5", "r") as f:
        tokens = f["tokens"][: len(rows)]  # the last token chosen is never fed
    np.testing.assert_array_equal(q4_0_rows(model, tokens), rows)  # this test's decoder is ggml's
    write_tap(tmp_path / "eng.h5", "token_embd", -1, q4_0_rows(model, tokens, offset, order))
    first = ("token_embd", 0)
    if weights:
        table = read_tap(tmp_path / "eng.h5", "weight.token_embd.weight", -1)
        write_tap(tmp_path / "eng.h5", "weight.token_embd.weight", -1,
                  q4_0_rows(model, np.arange(len(table)), offset, order))
        first = ("weight.token_embd.weight", 0)
    d = diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, first[0], words, "dequantization", evidence,
                 position=first[1])
    assert (d["residual"] is None) == (evidence == "indicated"), d


@pytest.mark.parametrize("shift, words", [(1, "= 1 row"), (-3, "before their offset = 3 rows")])
def test_a_table_loaded_from_a_shifted_offset_is_fitted(tmp_path, shift, words):
    """A loader that reads the embedding table some rows off its offset (a header or alignment
    miscounted): each recorded row is another row of the file's bytes; the rows read from outside
    the tensor hold whatever lay there."""
    model = traced(tmp_path, "q4_0", "--arch", "llama", "--type", "Q4_0", run_args=["--weights", "full"])
    n = len(read_tap(tmp_path / "eng.h5", "weight.token_embd.weight", -1))
    rows = q4_0_rows(model, np.clip(np.arange(n) + shift, 0, n - 1))
    rows[np.arange(n) + shift >= n] = 0
    rows[np.arange(n) + shift < 0] = 7
    write_tap(tmp_path / "eng.h5", "weight.token_embd.weight", -1, rows)
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
    assert code == 1 and r["first_divergence"]["tap"] == "weight.token_embd.weight", r["first_divergence"]
    d = r["diagnosis"]
    assert (d["class"], d["evidence"]) == ("weight-loading", "reproduced") and words in d["variant"], d


@pytest.mark.parametrize("added, words", [(slice(0, 32), "elements 0..31 only (32 of 64: the k/v width)"),
                                          (slice(16, 32), "elements 16..31 only (16 of 64: head 1 only)")])
def test_a_bias_added_to_part_of_the_row_is_fitted(tmp_path, added, words):
    """qwen2's q bias added at the k/v width (a loop bound from the k and v adds), or to one head:
    the elements that got it are fitted. Was bias without a variant."""
    model = traced(tmp_path, "qwen2", "--arch", "qwen2", "--seed", 3, n=3)
    bias = gguf_tensor(model, "blk.1.attn_q.bias").astype(np.float32)
    assert bias.shape == (64,)
    missing = np.ones(64, bool)
    missing[added] = False
    q = read_tap(tmp_path / "eng.h5", "attn_q", 1)
    write_tap(tmp_path / "eng.h5", "attn_q", 1, q - bias * missing)
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
    assert code == 1 and r["first_divergence"]["tap"] == "blk.1.attn_q", r["first_divergence"]
    d = r["diagnosis"]
    assert d["class"] == "bias" and d["evidence"] == "reproduced" and words in d["variant"], d


def test_another_layers_weight_and_bias_are_named(tmp_path):
    """qwen2's layer 1 q projection with layer 0's weight and bias (the tensor pointers not advanced)."""
    model = traced(tmp_path, "qwen2", "--arch", "qwen2", n=2)
    eng = tmp_path / "eng.h5"
    W, b = gguf_tensor(model, "blk.0.attn_q.weight"), gguf_tensor(model, "blk.0.attn_q.bias")
    q = read_tap(eng, "attn_q", 1)
    write_tap(eng, "attn_q", 1, read_tap(eng, "attn_norm", 1) @ W.reshape(q.shape[1], -1).T + b)
    diagnose(tmp_path / "ref.h5", eng, model, "blk.1.attn_q", "blk.0.attn_q.weight plus blk.0.attn_q.bias",
             "weight-loading")


@pytest.mark.parametrize("decode_only", [False, True])
def test_the_last_layers_weight_in_every_layer_is_fitted(tmp_path, decode_only):
    """Every layer's q projection bound to layer 3's weight (a closure over the loop variable, read
    after the loop), in every step or in the decode path only. Was unexplained (blind round 16, S7)."""
    model = traced(tmp_path, "llama", "--arch", "llama", "--n-layer", 4, n=3)
    eng = tmp_path / "eng.h5"
    W = gguf_tensor(model, "blk.3.attn_q.weight")
    q = read_tap(eng, "attn_q", 0)
    wrong = read_tap(eng, "attn_norm", 0) @ W.reshape(q.shape[1], -1).T
    prompt = len(PROMPT.split(","))
    if decode_only:
        q[prompt:] = wrong[prompt:]
    else:
        q = wrong
    write_tap(eng, "attn_q", 0, q)
    diagnose(tmp_path / "ref.h5", eng, model, "blk.0.attn_q",
             "blk.3.attn_q.weight instead of blk.0.attn_q.weight" + (" in decode steps only" if decode_only else ""),
             "weight-loading", position=prompt if decode_only else 0)


def test_a_fused_gate_up_split_row_by_row_is_named(tmp_path):
    """phi3's fused ffn_up ([gate; up]) split taking alternate rows instead of its halves. Was
    unexplained (blind round 16, P1)."""
    model = traced(tmp_path, "phi3", "--arch", "phi3", n=2)
    eng = tmp_path / "eng.h5"
    fused = gguf_tensor(model, "blk.0.ffn_up.weight")
    gate = read_tap(eng, "ffn_gate", 0)
    write_tap(eng, "ffn_gate", 0, read_tap(eng, "ffn_norm", 0) @ fused.reshape(2 * gate.shape[1], -1)[0::2].T)
    diagnose(tmp_path / "ref.h5", eng, model, "blk.0.ffn_gate", "split from blk.0.ffn_up.weight row by row",
             "weight-loading")


def test_a_q8_0_scale_indexed_one_block_late_is_named(tmp_path):
    """A Q8_0 decoder multiplying each block by the next block's scale (the last keeps its own)."""
    model = traced(tmp_path, "llama", "--arch", "llama", "--type", "Q8_0", n=2)
    eng = tmp_path / "eng.h5"
    from gguf import GGUFReader
    raw = np.asarray(next(t for t in GGUFReader(model).tensors if t.name == "blk.0.ffn_up.weight").data)
    blocks = raw.view(np.uint8).reshape(-1, 34)
    d = blocks[:, :2].copy().view(np.float16)[:, 0].astype(np.float64)
    q = blocks[:, 2:].copy().view(np.int8).astype(np.float64)
    up = read_tap(eng, "ffn_up", 0)
    W = (q * np.concatenate([d[1:], d[-1:]])[:, None]).reshape(up.shape[1], -1)
    write_tap(eng, "ffn_up", 0, read_tap(eng, "ffn_norm", 0) @ W.T)
    diagnose(tmp_path / "ref.h5", eng, model, "blk.0.ffn_up", "the scale of the block after them", "dequantization")


@pytest.mark.parametrize("decoded", ["as (q + m) * d", "with the fp16 min read as bf16"])
def test_a_q4_1_min_decoded_wrong_is_named(tmp_path, decoded):
    """A Q4_1 decoder computing (q + m) * d instead of d * q + m, or reading the fp16 min through a
    bf16 view. Were unexplained (blind rounds 15, X07, and 17, A08)."""
    model = traced(tmp_path, "llama", "--arch", "llama", "--type", "Q4_1", n=2)
    eng = tmp_path / "eng.h5"
    from gguf import GGUFReader
    raw = np.asarray(next(t for t in GGUFReader(model).tensors if t.name == "blk.0.ffn_up.weight").data)
    blocks = raw.view(np.uint8).reshape(-1, 20)
    d, m = (blocks[:, k:k + 2].copy().view(np.float16)[:, 0].astype(np.float64) for k in (0, 2))
    m_bf16 = (blocks[:, 2:4].copy().view(np.uint16)[:, 0].astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    q = np.concatenate([blocks[:, 4:] & 15, blocks[:, 4:] >> 4], axis=1).astype(np.float64)
    up = read_tap(eng, "ffn_up", 0)
    W = ((q + m[:, None]) * d[:, None] if decoded == "as (q + m) * d" else d[:, None] * q + m_bf16[:, None])
    write_tap(eng, "ffn_up", 0, read_tap(eng, "ffn_norm", 0) @ W.reshape(up.shape[1], -1).T)
    diagnose(tmp_path / "ref.h5", eng, model, "blk.0.ffn_up", f"Q4_1 blocks decoded {decoded}", "dequantization")


def test_an_embedding_row_pointer_off_by_some_elements_is_fitted(llama, tmp_path):
    """The lookup reads each row 3 elements late (an offset added twice): element i of the row of
    token t from t * n_embd + i + 3 of the table."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    table = gguf_tensor(llama / "llama.gguf", "token_embd.weight").reshape(-1)
    rows = read_tap(bad, "token_embd", -1)
    with h5py.File(bad, "r") as f:
        tokens = f["tokens"][: len(rows)]
    n = rows.shape[1]
    write_tap(bad, "token_embd", -1, np.stack([table[t * n + 3: t * n + 3 + n] for t in tokens]))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "token_embd", "the row read 3 elements late", "embedding")


def test_a_sibling_projections_bias_is_named(tmp_path):
    """qwen2's k gets q's bias (its first kv_dim elements): a copy-pasted bias add."""
    model = traced(tmp_path, "qwen2", "--arch", "qwen2", n=2)
    k = read_tap(tmp_path / "eng.h5", "attn_k", 0).astype(np.float64)
    bq, bk = gguf_tensor(model, "blk.0.attn_q.bias"), gguf_tensor(model, "blk.0.attn_k.bias")
    write_tap(tmp_path / "eng.h5", "attn_k", 0, k - bk + bq[: bk.size])
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "blk.0.attn_k",
             "blk.0.attn_q.bias (its first 32 elements) instead of blk.0.attn_k.bias", "bias")


def test_a_tied_head_on_a_table_scaled_in_place_is_named(tmp_path):
    """gemma2's sqrt(n_embd) folded into the tied table at load: the lookups are right, the head
    carries the factor under its soft-cap."""
    model = traced(tmp_path, "gemma2", "--arch", "gemma2", "--tied", n=2)
    logits = read_tap(tmp_path / "eng.h5", "output", -1).astype(np.float64)  # 2·tanh(z / 2)
    write_tap(tmp_path / "eng.h5", "output", -1, 2 * np.tanh(2 * np.arctanh(logits / 2) * np.sqrt(64) / 2))
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "output", "the tied table scaled in place", "embedding")


def test_every_tensor_of_one_type_wrong_points_at_its_decoder(tmp_path):
    """A decoder bug no variant replays (blind round 2, case 18: Q6_K's scale index): with weight
    taps, every tensor of that type differs and every other type matches, so the class is the
    decoder's, indicated. Was unexplained."""
    model = traced(tmp_path, "mixed", "--arch", "llama", "--tensor-type", "blk.*.ffn_*.weight=Q4_0", n=2,
                   run_args=["--weights"])
    with h5py.File(tmp_path / "eng.h5", "r") as f:
        q4 = [n for n in f["taps"] if n.startswith("weight.blk.") and ".ffn_" in n and "_norm" not in n]
    assert len(q4) == 6, q4
    for name in q4:
        rows = read_tap(tmp_path / "eng.h5", name, -1)
        rows[:, 3::32] *= 1.5  # one element of every block decoded with the wrong scale
        write_tap(tmp_path / "eng.h5", name, -1, rows)
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
    assert code == 1 and r["first_divergence"]["tap"].startswith("weight.blk."), r["first_divergence"]
    d = r["diagnosis"]
    assert (d["class"], d["evidence"]) == ("dequantization", "indicated"), d
    assert "look at the Q4_0 decoder" in d["explanation"], d


def test_an_embedding_gathered_as_a_column_is_named(llama, tmp_path):
    """The table taken as [n_embd][n_vocab]: element i of a token's row read at i * n_vocab + id."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    table = gguf_tensor(llama / "llama.gguf", "token_embd.weight")  # (n_vocab, n_embd)
    flat, (n_vocab, n_embd) = table.ravel(), table.shape
    with h5py.File(bad, "r") as f:
        tokens = [int(t) for t in f["tokens"][...]]
    rows = read_tap(bad, "token_embd", -1)
    for p in range(rows.shape[0]):
        rows[p] = flat[np.arange(n_embd) * n_vocab + tokens[p]]
    write_tap(bad, "token_embd", -1, rows)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "token_embd", "a column gathered", "embedding")


def gguf_decoded(model, name, edit=lambda raw: raw):
    """Tensor `name` as gguf-py decodes it, (rows, cols) in float64, its raw bytes (rows, row_bytes)
    passed through edit first."""
    import gguf
    t = next(t for t in gguf.GGUFReader(model).tensors if t.name == name)
    return gguf.quants.dequantize(edit(np.array(t.data)), t.tensor_type).astype(np.float64)


def q4_k_scale_high_bits_dropped(raw):
    """Q4_K blocks (144 bytes: d, dmin, 12 scale bytes, 128 of quants) whose sub-blocks 4..7 get
    only the low 4 bits of their 6-bit scale and min: bits 6-7 of scale bytes 0..7 cleared."""
    raw.reshape(raw.shape[0], -1, 144)[:, :, 4:12] &= 0x3F
    return raw


def nibbles_interleaved(w, group=32):
    """Each group's halves interleaved: element 2j its first half's j, 2j + 1 its second half's."""
    return w.reshape(w.shape[0], -1, 2, group // 2).transpose(0, 1, 3, 2).reshape(w.shape)


@pytest.mark.parametrize("shape, wtype, tap, layer, x_tap, wrong, words", [
    (K_SHAPE, "Q4_K", "attn_q", 0, "attn_norm", lambda m, n: gguf_decoded(m, n, q4_k_scale_high_bits_dropped),
     "Q4_K sub-blocks 4..7 decoded with only the low 4 bits of their 6-bit scale and min"),
    ([], "Q4_0", "ffn_down", 1, "ffn.act", lambda m, n: nibbles_interleaved(gguf_decoded(m, n)),
     "Q4_0 nibbles unpacked interleaved"),
])
def test_a_dot_kernels_block_decoder_under_8_bit_activations_is_named(tmp_path, shape, wtype, tap, layer, x_tap,
                                                                      wrong, words):
    """A dot-product kernel that decodes its weight's blocks wrongly in a run whose activations are
    quantized to 8 bits (llama.cpp's CPU kernels): the tap is the run's own plus (W' - W) x, under
    the 8-bit noise. The scale and min of Q4_K's upper sub-blocks without their high bits; Q4_0's
    nibbles unpacked side by side. Were unexplained (llama.cpp, blind round 9)."""
    model = tmp_path / "m.gguf"
    assert run("fixture", "--arch", "llama", *shape, "--type", wtype, "--seed", 3, "-o", model).returncode == 0
    for backend, out, precision in (("reference", "ref.h5", "f32"), ("host", "eng.h5", "q8")):
        p = run("run", "--backend", backend, "--precision", precision, "-m", model, "--tokens", PROMPT, "-n", 3,
                "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    bad = tmp_path / "eng.h5"
    name = f"blk.{layer}.{tap}.weight"
    x = read_tap(bad, x_tap, layer).astype(np.float64)
    write_tap(bad, tap, layer, read_tap(bad, tap, layer) + x @ (wrong(model, name) - gguf_decoded(model, name)).T)
    diagnose(tmp_path / "ref.h5", bad, model, f"blk.{layer}.{tap}", words, "dequantization")


def test_a_token_taken_for_padding_is_named(llama, tmp_path):
    """Every row of token 70 zeroed, wherever it stands: a padding mask built from input_ids ==
    pad_id where the pad id is a real token (often EOS). Was unexplained (blind round 12)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    with h5py.File(bad, "r") as f:
        tokens = f["tokens"][:]
    rows = read_tap(bad, "token_embd", -1)
    rows[tokens[:len(rows)] == 70] = 0
    write_tap(bad, "token_embd", -1, rows)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "token_embd", "token 70's rows zeroed wherever it stands: a "
             "padding mask that takes a real token for padding", "embedding", position=1)


def test_a_bias_added_to_each_batchs_first_row_only_is_named(tmp_path):
    """The bias add walking n_out elements of the flat (rows, n_out) output: the prompt's first row
    gets it, its other rows do not, each decode step's one row does (blind round 11)."""
    model = traced(tmp_path, "qwen2", "--arch", "qwen2")
    bad = tmp_path / "eng.h5"
    q, b = read_tap(bad, "attn_q", 0), gguf_tensor(model, "blk.0.attn_q.bias")
    prompt = len(PROMPT.split(","))
    q[1:prompt] -= b
    write_tap(bad, "attn_q", 0, q)
    diagnose(tmp_path / "ref.h5", bad, model, "blk.0.attn_q", "W x + b on the first row of each batch only", "bias",
             position=1)


def decoded_f32_copy(model, out, edit):
    """model's tensors decoded by gguf-py, edited per tensor (edit(tensor, values)), written as F32
    under the same metadata: what an engine with that decoder computes with."""
    from gguf import GGUFReader, GGUFWriter, GGUFValueType
    from gguf.quants import dequantize
    r = GGUFReader(model)
    w = GGUFWriter(out, arch=str(r.fields["general.architecture"].contents()))
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name in ("general.architecture", "general.alignment"):
            continue
        sub = {"sub_type": f.types[1]} if f.types[0] == GGUFValueType.ARRAY else {}
        w.add_key_value(f.name, f.contents(), f.types[0], **sub)
    for t in r.tensors:
        w.add_tensor(t.name, edit(t, dequantize(t.data, t.tensor_type).astype(np.float32)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_decoder_bug_in_every_tensor_of_its_type_is_one_root(tmp_path):
    """A Q4_0 decoder subtracting 7 instead of 8 (every value one scale step up), in every Q4_0
    tensor: the embedding names the decoder from its blocks, and the projections no variant
    reproduces are that decoder again, one root in --all (blind round 12: a Q4_K decoder gave 8)."""
    model = tmp_path / "q40.gguf"
    assert run("fixture", "--arch", "llama", "--type", "Q4_0", "--seed", 3, "-o", model).returncode == 0

    def minus_7(t, values):
        if t.tensor_type.name != "Q4_0":
            return values
        scales = np.frombuffer(np.ascontiguousarray(t.data).reshape(-1, 18)[:, :2].tobytes(), np.float16)
        return (values.reshape(-1, 32) + scales.astype(np.float32)[:, None]).reshape(values.shape)

    decoded_f32_copy(model, tmp_path / "bugged.gguf", minus_7)
    for backend, m, out in (("reference", model, "ref.h5"), ("host", tmp_path / "bugged.gguf", "eng.h5")):
        p = run("run", "--backend", backend, "-m", m, "--tokens", PROMPT, "-n", 4, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    with h5py.File(tmp_path / "ref.h5") as a, h5py.File(tmp_path / "eng.h5", "r+") as b:
        for key in ("model_sha256", "model_path"):  # the engine's trace as one of the Q4_0 model
            b.attrs[key] = a.attrs[key]
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model, "--all")
    assert code == 1 and [(root["tap"], root["class"]) for root in r["roots"]] == [("token_embd", "dequantization")], \
        [(root["tap"], root["class"]) for root in r["roots"]]
    assert {"blk.0.attn_k", "blk.1.ffn_up"} <= set(r["roots"][0]["explained"]), r["roots"][0]


def test_a_norm_weight_found_by_another_layers_name_is_named(tmp_path):
    """Layer 0's attn_norm with layer 2's weight (a lookup by prefix, as "blk.1" finds "blk.19"):
    not the layer before or after. Was unexplained (blind round 14)."""
    model = traced(tmp_path, "llama4", "--arch", "llama", "--n-layer", 4)
    bad = tmp_path / "eng.h5"
    x = read_tap(bad, "token_embd", -1)
    write_tap(bad, "attn_norm", 0, rmsnorm(x, gguf_tensor(model, "blk.2.attn_norm.weight"), 1e-5))
    diagnose(tmp_path / "ref.h5", bad, model, "blk.0.attn_norm", "rmsnorm(x) * blk.2.attn_norm.weight (another layer's "
             "weight: the weight found by another layer's index or name", "weight-loading")



def test_a_projection_times_one_factor_is_its_weight_scaled(llama, tmp_path):
    """Blind round 26's B85: attn_v's weight doubled at load (an F32 weight: a factor folded in); the
    cache stores the doubled rows too."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    for name in ("attn_v", "kv.v"):
        write_tap(bad, name, 0, read_tap(bad, name, 0) * np.float32(2))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_v", "W times 2", "weight-loading")


def test_another_projections_square_weight_is_named(llama, tmp_path):
    """Blind round 26's B73: the attention's output projection multiplied by attn_q.weight (square
    here), a sibling whose input is another tap."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    wq = gguf_tensor(llama / "llama.gguf", "blk.0.attn_q.weight")
    write_tap(bad, "attn_output", 0, read_tap(bad, "attn.out", 0).astype(np.float64) @ wq.T)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.attn_output",
             "x multiplied by blk.0.attn_q.weight instead of blk.0.attn_output.weight", "weight-loading", position=0)
