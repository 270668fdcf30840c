"""Logits and tokens: ids truncated or fed twice, chunks fed the wrong ids, logits from the wrong
row, caps, temperatures and penalties edited into the recorded logits."""
import shutil

import h5py
import numpy as np
import pytest

from bug_traces import (PROMPT, run, read_tap, write_tap, traced, diff_json, replayed_probs, gguf_tensor,
                        diagnose)
from tapdiff_trace import TraceReader


def test_a_token_id_truncated_to_8_bits_is_named(llama, tmp_path):
    """A token id stored in a byte: token 300 looks up row 44 (the fixture has 320 tokens)."""
    model = llama / "llama.gguf"
    for backend, out, tokens in (("reference", "ref.h5", "1,70,300,33"), ("host", "eng.h5", "1,70,300,33"),
                                 ("host", "row44.h5", "1,70,44,33")):
        p = run("run", "--backend", backend, "-m", model, "--tokens", tokens, "-n", 2, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    rows = read_tap(tmp_path / "eng.h5", "token_embd", -1)
    rows[2] = read_tap(tmp_path / "row44.h5", "token_embd", -1)[2]
    write_tap(tmp_path / "eng.h5", "token_embd", -1, rows)
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("token_embd", 2)
    assert r["diagnosis"]["class"] == "embedding" and "8 bits" in r["diagnosis"]["variant"], r["diagnosis"]


def test_rows_of_other_tokens_are_found_in_the_table(llama, tmp_path):
    """Positions 2 and 4 embedded as tokens nobody would list (a stale id buffer, an id from
    another sequence of the batch): each row is found in the table by its values."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    table = gguf_tensor(llama / "llama.gguf", "token_embd.weight")
    rows = read_tap(bad, "token_embd", -1)
    rows[2], rows[4] = table[217], table[9]
    write_tap(bad, "token_embd", -1, rows)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "token_embd", "rows of other tokens, each found in the "
                 "table (position 2 holds token 217's row for 200; position 4 holds token 9's row for 5", "embedding",
                 position=2)


def test_a_token_id_wrapped_as_a_signed_16_bit_integer_is_named(tmp_path):
    """Ids staged as int16: 40000 reads as -25536, and PyTorch's negative index counts from the
    table's end, row 40000 - 65536 + n_vocab. Was unexplained (blind round 15, X08)."""
    model = tmp_path / "v.gguf"
    assert run("fixture", "--arch", "llama", "--n-vocab", 50000, "--n-embd", 32, "--n-head", 2, "--n-head-kv", 1,
               "--n-ff", 64, "-o", model).returncode == 0
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", model, "--tokens", "1,70,40000,33", "-n", 1, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    rows = read_tap(tmp_path / "eng.h5", "token_embd", -1)
    rows[2] = gguf_tensor(model, "token_embd.weight")[40000 - 65536 + 50000]
    write_tap(tmp_path / "eng.h5", "token_embd", -1, rows)
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "token_embd", "wrapped as a signed 16-bit integer",
             "embedding", position=2)


@pytest.mark.parametrize("row, words", [(-1, "row before the last"), (2, "from the hidden state of position 2 (fitted")])
def test_logits_of_another_row_of_the_batch_are_named(llama, tmp_path, row, words):
    """A batched prefill whose head reads the row before the last, or a row nobody would list (a
    stale row of a staging buffer: blind round 16, S5, was unexplained): the prompt's logits are
    that position's."""
    model = llama / "llama.gguf"
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 3, "--logits", "all",
                "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    last = len(PROMPT.split(",")) - 1
    logits = read_tap(tmp_path / "eng.h5", "output", -1)
    logits[last] = logits[last - 1 if row < 0 else row]
    write_tap(tmp_path / "eng.h5", "output", -1, logits)
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("output", last)
    assert r["diagnosis"]["class"] == "buffer" and words in (r["diagnosis"]["variant"] or ""), r["diagnosis"]


def test_logits_capped_at_the_attention_cap_are_named(tmp_path):
    """gemma2 caps scores at 1 and logits at 2 (the fixture's): the head given the attention's cap."""
    model = traced(tmp_path, "gemma2", "--arch", "gemma2", n=3)
    logits = read_tap(tmp_path / "eng.h5", "output", -1).astype(np.float64)
    write_tap(tmp_path / "eng.h5", "output", -1, np.tanh(2 * np.arctanh(logits / 2)))
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
    assert code == 1 and r["first_divergence"]["tap"] == "output", r["first_divergence"]
    assert r["diagnosis"]["class"] == "softcap" and "attention's cap" in r["diagnosis"]["variant"], r["diagnosis"]


@pytest.mark.parametrize("misplaced, words", [
    ("final cap", "capped at the logits' final cap 2 instead of the attention's 1"),
    ("after softmax", "applied to the probabilities after the softmax")])
def test_gemma2_softcap_misplaced_is_named(gemma2, tmp_path, misplaced, words):
    """The attention capped with the logits' constant; the cap applied to the probabilities."""
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    if misplaced == "final cap":
        new = replayed_probs(bad, 1, scores=lambda x, d: 2 * np.tanh(x / np.sqrt(d) / 2))
    else:  # c·tanh(p / c) on uncapped scores' probabilities, c = 1
        new = np.tanh(replayed_probs(bad, 1))
    write_tap(bad, "attn.probs", 1, new)
    diagnose(gemma2 / "ref.h5", bad, gemma2 / "gemma2.gguf", "blk.1.attn.probs", words, "softcap")


def test_logits_capped_without_dividing_by_the_cap_are_named(gemma2, tmp_path):
    """gemma2's final soft-cap written as cap·tanh(x) instead of cap·tanh(x / cap)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(gemma2 / "eng.h5", bad)
    from gguf import GGUFReader
    names = [t.name for t in GGUFReader(gemma2 / "gemma2.gguf").tensors]
    W = gguf_tensor(gemma2 / "gemma2.gguf", "output.weight" if "output.weight" in names else "token_embd.weight")
    logits = read_tap(bad, "output", -1)  # the prompt's last position on
    x = read_tap(bad, "output_norm", -1)[-logits.shape[0]:].astype(np.float64)
    write_tap(bad, "output", -1, 2 * np.tanh(x @ W.reshape(-1, x.shape[1]).T))
    diagnose(gemma2 / "ref.h5", bad, gemma2 / "gemma2.gguf", "output", "the division by the cap left out", "softcap")


def test_prefill_chunks_fed_the_first_chunks_ids_are_named(llama, tmp_path):
    """--prefill-chunk 2: the token ids uploaded for the first chunk only, every later chunk of the
    prompt embedding them again."""
    bad = tmp_path / "eng.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6, "--prefill-chunk", 2,
            "-o", bad)
    assert p.returncode == 0, p.stderr
    rows = read_tap(bad, "token_embd", -1)
    prompt = len(PROMPT.split(","))
    rows[:prompt] = rows[np.arange(prompt) % 2]
    write_tap(bad, "token_embd", -1, rows)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "token_embd", "the first chunk's token ids", "token-sequence")


def test_a_first_token_fed_twice_is_named(llama, tmp_path):
    """A BOS prepended to a prompt that has one: every later position embeds the token before it."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    rows = read_tap(bad, "token_embd", -1)
    rows[1:] = rows[:-1].copy()
    write_tap(bad, "token_embd", -1, rows)
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "token_embd", "the first token fed twice", "token-sequence")


def test_decode_steps_fed_their_own_input_again_say_no_rerun_separates_the_tie(llama, tmp_path):
    """Decode steps feeding the last prompt token again instead of the one sampled: each step the
    row of the step before, as a lookup that left its output from the step before gives, in any
    run. The tie's separating experiment had asked for a longer run (blind round 13)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    rows = read_tap(bad, "token_embd", -1)
    prompt = len(PROMPT.split(","))
    rows[prompt:] = rows[prompt - 1]
    write_tap(bad, "token_embd", -1, rows)
    with h5py.File(bad, "r+") as f:  # the second step's logits pick another token: compared up to the first step
        f["tokens"][prompt + 1] = (f["tokens"][prompt + 1] + 1) % 320
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    d = r["diagnosis"]
    assert code == 1 and d["evidence"] == "tied" and {t["class"] for t in d["ties"]} == {"token-sequence", "buffer"}, d
    assert d["separating_experiment"].startswith("no rerun separates them"), d["separating_experiment"]


def test_the_logit_of_the_token_fed_most_off_is_said(llama, tmp_path):
    """From the first decode step on, the logit of the token fed there far off (its row of a tied
    head written in place through a view of the embedding row, blind round 13): said so."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    with TraceReader(str(bad)) as trace:
        tokens = trace.tokens
        positions, logits = trace.read("output", -1)
    prompt = len(PROMPT.split(","))
    for row, p in enumerate(positions):
        if p >= prompt:
            logits[row, tokens[p]] += 50
    write_tap(bad, "output", -1, logits)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("output", prompt)
    assert any(f"the logit most off is token {tokens[prompt]}'s, the token fed at position {prompt}" in s
               for s in r["diagnosis"]["signatures"]), r["diagnosis"]["signatures"]


def test_logits_normalized_in_place_by_a_sampler_are_named(llama, tmp_path):
    """A sampler's stable softmax subtracting each row's max from the logits buffer before the
    tap records it. Was unexplained (blind round 14)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    logits = read_tap(bad, "output", -1)
    write_tap(bad, "output", -1, logits - logits.max(axis=1, keepdims=True))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output", "shifted by one number of its own: their max "
             "subtracted", "sampling")


def test_a_sampler_mask_written_into_the_logits_is_named(tmp_path):
    """A sampler banning token 7 until a minimum length (an end-of-sequence ban) by writing -inf
    into the buffer the head wrote, before the tap records it: every other logit is right. Was
    called non-finite, with the tied Q8_0 table's decoder as a suspect (blind round 15, X17)."""
    model = traced(tmp_path, "q8", "--arch", "llama", "--type", "Q8_0", "--tied", n=3)
    bad = tmp_path / "eng.h5"
    logits = read_tap(bad, "output", -1)
    logits[1:, 7] = -np.inf
    write_tap(bad, "output", -1, logits)
    d = diagnose(tmp_path / "ref.h5", bad, model, "output", "the correct logits with token 7 set to -inf at position",
                 "sampling", evidence="indicated")
    assert not any("do not hold it as decoded" in s for s in d["signatures"]), d["signatures"]


def test_logits_replaced_by_a_samplers_softmax_are_named(llama, tmp_path):
    """A sampler computing softmax(logits / 0.7) in place in the logits buffer before the tap
    records it. Was unexplained (blind round 17, A11)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    z = read_tap(bad, "output", -1).astype(np.float64) / 0.7
    e = np.exp(z - z.max(axis=1, keepdims=True))
    write_tap(bad, "output", -1, e / e.sum(axis=1, keepdims=True))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output", "the logits replaced by their softmax at "
             "temperature 0.7", "sampling")


def test_token_ids_cast_to_bf16_are_named(tmp_path):
    """Token ids moved to the device in the model's dtype: past 256 bf16 rounds them (1030 reads
    row 1032). Was found only as rows of other tokens (blind round 17, A09)."""
    model = tmp_path / "v.gguf"
    assert run("fixture", "--arch", "llama", "--n-vocab", 2048, "-o", model).returncode == 0
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", model, "--tokens", "1,70,1030,33", "-n", 1, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    rows = read_tap(tmp_path / "eng.h5", "token_embd", -1)
    rows[2] = gguf_tensor(model, "token_embd.weight")[1032]
    write_tap(tmp_path / "eng.h5", "token_embd", -1, rows)
    diagnose(tmp_path / "ref.h5", tmp_path / "eng.h5", model, "token_embd", "the row of the token id rounded to bf16",
             "embedding", position=2)


def test_logits_times_one_factor_tie_a_temperature_with_a_scaled_head(llama, tmp_path):
    """Every logit times 1.25: a sampler's temperature applied in place before the tap records them,
    or the head scaled (its weight as loaded, a logit scale in the forward pass: blind round 26's
    B70 and B84, once named "sampling"). The logits cannot tell them apart: the factor is fitted, the
    class withheld, and the weights named as what separates them."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "output", -1, read_tap(bad, "output", -1) / np.float32(0.8))
    d = diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output", "times 1.25 = 1 / 0.8", "unexplained",
                 evidence="tied")
    assert {t["class"] for t in d["ties"]} == {"sampling", "weight-loading"}, d["ties"]
    assert "--weights" in d["separating_experiment"], d


@pytest.mark.parametrize("edit, words", [
    (lambda v, n: np.where(v > 0, v / 1.1, v * 1.1), "a repetition penalty of 1.1 on the logits of the tokens seen"),
    (lambda v, n: v - 0.5, "a presence penalty of 0.5 subtracted"),
    (lambda v, n: v - 0.25 * n, "a frequency penalty of 0.25 subtracted"),
])
def test_penalties_on_the_tokens_seen_edited_into_the_logits_are_fitted(tmp_path, edit, words):
    """A sampler that penalizes the tokens seen so far in the logits buffer the trace records: only
    those logits change (a prompt that repeats a token tells presence from frequency). Was
    unexplained, its signature pointing at the head's weight."""
    model = tmp_path / "llama.gguf"
    assert run("fixture", "--arch", "llama", "--seed", 3, "-o", model).returncode == 0
    prompt = "1,70,200,70,5,70"
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        assert run("run", "--backend", backend, "-m", model, "--tokens", prompt, "-n", 4, "-o", tmp_path / out).returncode == 0
    bad = tmp_path / "eng.h5"
    logits = read_tap(bad, "output", -1).astype(np.float64)  # from the prompt's last position on
    with h5py.File(bad, "r") as f:
        tokens = f["tokens"][:]
    first = len(prompt.split(",")) - 1
    for i, row in enumerate(logits):
        seen, counts = np.unique(tokens[: first + i + 1], return_counts=True)
        row[seen] = edit(row[seen], counts)
    write_tap(bad, "output", -1, logits)
    diagnose(tmp_path / "ref.h5", bad, model, "output", words, "sampling")


def test_logits_soft_capped_in_a_model_without_a_cap_are_fitted(llama, tmp_path):
    """Blind round 26's B79: the logits capped as gemma2's are, c·tanh(x / c), in a llama model."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    logits = read_tap(bad, "output", -1).astype(np.float64)
    cap = 0.5 * np.abs(logits).max()
    write_tap(bad, "output", -1, cap * np.tanh(logits / cap))
    diagnose(llama / "ref.h5", bad, llama / "llama.gguf", "output", "though the model declares no cap", "softcap")
