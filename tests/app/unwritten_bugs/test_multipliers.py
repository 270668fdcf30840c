"""Granite's multipliers written wrong (none of them in the fault catalogue): the embedding's taken
for Gemma's, applied twice; the residual one applied twice or of another value, or one where the
model has none; the logits multiplied by their scale; the attention's multiplier ignored."""
import shutil

import numpy as np
import pytest

from bug_traces import read_tap, write_tap, traced, replayed_probs, gguf_tensor, diagnose, PROMPT


@pytest.fixture(scope="module")
def granite(tmp_path_factory):
    """granite: embeddings times 12, each block's output times 0.22, scores times 1/16 (1/head_dim),
    logits divided by 8."""
    d = tmp_path_factory.mktemp("granite")
    return d, traced(d, "granite", "--arch", "granite")


def bad_copy(d, tmp_path):
    bad = tmp_path / "eng.h5"
    shutil.copy(d / "eng.h5", bad)
    return bad


@pytest.mark.parametrize("factor, words", [
    (8 / 12, "sqrt(n_embd) = 8 (Gemma's scale) instead of the embedding multiplier 12"),
    (12, "the embedding multiplier twice (144)"),
    (1 / 12, "not scaled by the embedding multiplier 12"),
])
def test_the_embedding_multiplier_written_wrong_is_named(granite, tmp_path, factor, words):
    d, model = granite
    bad = bad_copy(d, tmp_path)
    write_tap(bad, "token_embd", -1, read_tap(bad, "token_embd", -1) * np.float32(factor))
    diagnose(d / "ref.h5", bad, model, "token_embd", words, "embedding", position=0)


@pytest.mark.parametrize("k, words, evidence", [
    (0.22 * 0.22, "the residual multiplier 0.22 applied twice", "reproduced"),
    (0.5, "scaled by 0.5 (fitted) instead of the residual multiplier 0.22", "reproduced"),
])
def test_the_residual_multiplier_written_wrong_is_named(granite, tmp_path, k, words, evidence):
    d, model = granite
    bad = bad_copy(d, tmp_path)
    x, o = read_tap(bad, "token_embd", -1), read_tap(bad, "attn_output", 0)
    write_tap(bad, "resid.attn", 0, (x + np.float32(k) * o).astype(np.float32))
    diagnose(d / "ref.h5", bad, model, "blk.0.resid.attn", words, "residual", evidence=evidence, position=0)


def test_a_residual_multiplier_where_the_model_has_none_is_fitted(llama, tmp_path):
    """Granite's residual code path run on a llama model: each block's output times 0.22."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    x, o = read_tap(bad, "resid.attn", 0), read_tap(bad, "ffn_down", 0)
    write_tap(bad, "resid.ffn", 0, (x + np.float32(0.22) * o).astype(np.float32))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "blk.0.resid.ffn",
             "scaled by 0.22 (fitted), though the model has no residual multiplier", "residual", position=0)


def test_logits_multiplied_by_the_logit_scale_are_named(granite, tmp_path):
    """logits * logits_scaling, where Granite divides (a port that read the config's name as a
    multiplier)."""
    d, model = granite
    bad = bad_copy(d, tmp_path)
    write_tap(bad, "output", -1, read_tap(bad, "output", -1) * np.float32(64))
    diagnose(d / "ref.h5", bad, model, "output", "multiplied by the logit scale instead of divided", "logit-scale")


def test_the_attention_multiplier_ignored_is_named(granite, tmp_path):
    """Scores scaled by llama's 1/sqrt(head_dim) where Granite's attention.scale (1/head_dim here)
    belongs: the model's key read and never used."""
    d, model = granite
    bad = bad_copy(d, tmp_path)
    write_tap(bad, "attn.probs", 0, replayed_probs(bad, 0))
    assert not np.allclose(read_tap(bad, "attn.probs", 0), read_tap(d / "eng.h5", "attn.probs", 0), atol=1e-4)
    diagnose(d / "ref.h5", bad, model, "blk.0.attn.probs", "attention.scale ignored", "attention-scale")


def test_the_logit_scale_applied_to_the_stream_is_named(granite, tmp_path):
    """Blind round 27: the stream divided by the logit scale before output_norm, which cancels it but
    for its epsilon (so the logits go unscaled). Was named residual, a false lead."""
    d, model = granite
    bad = bad_copy(d, tmp_path)
    x = read_tap(bad, "resid.ffn", 1).astype(np.float64) / 8
    w = gguf_tensor(model, "output_norm.weight")
    write_tap(bad, "output_norm", -1, x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5) * w)
    diagnose(d / "ref.h5", bad, model, "output_norm", "the logit scale applied to the stream instead of the logits",
             "logit-scale", position=0)


@pytest.mark.parametrize("tap, stream, block, layer", [("resid.attn", "token_embd", "attn_output", 0),
                                                      ("resid.ffn", "resid.attn", "ffn_down", 0)])
def test_the_residual_multiplier_on_the_stream_is_named(granite, tmp_path, tap, stream, block, layer):
    """Blind round 27: 0.22 * x + o, the multiplier put on the stream instead of the block's output."""
    d, model = granite
    bad = bad_copy(d, tmp_path)
    x = read_tap(bad, stream, -1 if stream == "token_embd" else layer)
    write_tap(bad, tap, layer, (np.float32(0.22) * x + read_tap(bad, block, layer)).astype(np.float32))
    diagnose(d / "ref.h5", bad, model, f"blk.{layer}.{tap}",
             "the residual multiplier applied to the stream instead of the block's output", "residual", position=0)


def test_the_residual_multiplier_left_out_of_decode_steps_is_named(granite, tmp_path):
    """Blind round 27: the decode path's add written apart, without the multiplier."""
    d, model = granite
    bad = bad_copy(d, tmp_path)
    prompt = len(PROMPT.split(","))
    rows = read_tap(bad, "resid.attn", 0)
    x, o = read_tap(bad, "token_embd", -1), read_tap(bad, "attn_output", 0)
    rows[prompt:] = x[prompt:] + o[prompt:]
    write_tap(bad, "resid.attn", 0, rows)
    diagnose(d / "ref.h5", bad, model, "blk.0.resid.attn", "the residual multiplier 0.22 not applied there",
             "residual", position=prompt)


def test_logits_divided_by_another_multiplier_are_named(granite, tmp_path):
    """Blind round 27: the divisor read from embedding_scale (12) instead of logit_scale (8). Was a
    tie of a sampler's temperature with a scaled head."""
    d, model = granite
    bad = bad_copy(d, tmp_path)
    write_tap(bad, "output", -1, read_tap(bad, "output", -1) * np.float32(8 / 12))
    diagnose(d / "ref.h5", bad, model, "output", "divided by embedding_scale instead of the logit scale 8",
             "logit-scale")


def test_the_embedding_multiplier_on_the_first_row_only_is_named(granite, tmp_path):
    """Blind round 27: x[0] *= s where x *= s belonged: the prompt's later rows unscaled."""
    d, model = granite
    bad = bad_copy(d, tmp_path)
    rows = read_tap(bad, "token_embd", -1)
    prompt = len(PROMPT.split(","))
    rows[1:prompt] /= np.float32(12)
    write_tap(bad, "token_embd", -1, rows)
    diagnose(d / "ref.h5", bad, model, "token_embd", "scaled on the prompt batch's first row only", "embedding",
             position=1)
