"""Engines that record a few taps: their residual stream (a user's own engine), or the hidden
states alone (a Hugging Face output_hidden_states dump). The ops between the recorded taps are
replayed from the taps that agree, and each op's variants, carried through the ops after it to
the diverged tap, name the bug (blind round 20: 0 of 16 named before, the class unknown at every
resid tap)."""
import pytest

from bug_traces import PROMPT, run, diff_json

STREAM = "token_embd,blk.*.resid.*,output_norm,output"
HIDDEN = "blk.*.resid.ffn,output_norm,output"
LAST = "blk.1.resid.ffn,output_norm,output"  # every other layer's hidden state: a gap of two layers


def engine_trace(llama, tmp_path, taps, *inject):
    out = tmp_path / "sparse.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6,
            *(["--inject", *inject] if inject else []), "--taps", taps, "-o", out)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("taps", [STREAM, HIDDEN])
def test_a_right_engine_recording_few_taps_passes(llama, tmp_path, taps):
    code, r = diff_json(llama / "ref.h5", engine_trace(llama, tmp_path, taps), "--model", llama / "llama.gguf")
    assert code == 0, r.get("diagnosis")


@pytest.mark.parametrize("fault,taps,tap,bug_class,words", [
    # one op of the block, carried through the ops after it
    ("weights-transposed", STREAM, "blk.0.resid.attn", "matmul-layout", ["blk.0.attn_output,", "W^T x"]),
    ("gqa-head-map", HIDDEN, "blk.0.resid.ffn", "gqa-mapping", ["blk.0.attn.out,", "h % n_head_kv"]),
    # q and k wrong alike: one position counter, one pairing
    ("rope-wrong-pairing", HIDDEN, "blk.0.resid.ffn", "rope", ["attn_q.rope and attn_k.rope", "both pairs"]),
    ("prefill-rope-same-position", STREAM, "blk.0.resid.attn", "rope",
     ["attn_q.rope and attn_k.rope", "batch's start position"]),
    # both blocks' norms, one after the other: the second replayed from what the first gave it
    ("norm-weight-dropped", HIDDEN, "blk.0.resid.ffn", "normalization",
     ["attn_norm and ffn_norm", "without the norm weight"]),
    # the prompt intact: the caches' variants act in decode steps only, reaching attention
    ("kv-not-written-decode", STREAM, "blk.0.resid.attn", "kv-cache",
     ["kv.k and kv.v", "never written", "in decode steps only"]),
    # a gap of two layers: the code every layer runs, wrong alike in both
    ("gqa-head-map", LAST, "blk.1.resid.ffn", "gqa-mapping", ["attn.out in layers 0-1", "h % n_head_kv"]),
    ("norm-weight-dropped", LAST, "blk.1.resid.ffn", "normalization",
     ["attn_norm and ffn_norm in layers 0-1", "without the norm weight"]),
])
def test_an_unrecorded_ops_bug_is_named_through_the_ops_after_it(llama, tmp_path, fault, taps, tap, bug_class, words):
    code, r = diff_json(llama / "ref.h5", engine_trace(llama, tmp_path, taps, fault), "--model", llama / "llama.gguf")
    d = r["diagnosis"]
    assert code == 1 and r["first_divergence"]["tap"] == tap, r["first_divergence"]
    assert d["class"] == bug_class and d["evidence"] == "reproduced", d
    assert all(w in d["variant"] for w in words), d["variant"]
    assert "which the trace does not record" in d["variant"], d["variant"]


def test_gate_and_up_exchanged_unrecorded_ties_the_activation_with_the_weights(llama, tmp_path):
    """silu(up)·gate and each projection given the other's weight are the same numbers at resid.ffn:
    a tie of two classes, and recording the ops separates them."""
    sparse = engine_trace(llama, tmp_path, HIDDEN, "ffn-gate-up-swapped")
    code, r = diff_json(llama / "ref.h5", sparse, "--model", llama / "llama.gguf")
    d = r["diagnosis"]
    assert code == 1 and d["class"] == "unexplained" and d["evidence"] == "tied", d
    assert {t["class"] for t in d["ties"]} == {"activation", "weight-loading"}, d["ties"]
    assert "record blk.0.ffn.act, blk.0.ffn_gate, blk.0.ffn_up" in d["separating_experiment"], d


def test_a_trace_of_few_taps_says_which_unrecorded_ops_hold_the_bug(llama, tmp_path):
    """An engine that records only the residual stream and the logits, its attention output
    added twice at layer 0: resid.attn's own replay reads attn_output as replayed from the
    recorded stream, the diagnosis names the ops between the recorded taps (layer 0's attention
    block), and the report says what the trace lacks in one finding, not one a tap (blind round
    19: 34 lines for 2 layers)."""
    from tapdiff_trace import TraceReader, TraceWriter
    sparse = tmp_path / "sparse.h5"
    kept = {"token_embd", "resid.attn", "resid.ffn", "output_norm", "output"}
    with TraceReader(str(llama / "eng.h5")) as r, TraceWriter(
            str(sparse), producer="external", model_path=r.metadata["model_path"],
            model_sha256=r.metadata["model_sha256"], hparams=r.hparams, precision=r.metadata["precision"],
            prompt_length=r.metadata["prompt_length"], tokens=r.tokens, dims=r.dims) as w:
        for tap in r.taps():
            if tap.name not in kept:
                continue
            positions, rows = r.read(tap.name, tap.layer)
            if (tap.name, tap.layer) == ("resid.attn", 0):
                rows = 2 * rows - r.read("token_embd", -1)[1][:len(rows)]  # x + 2·o
            w.record(tap.name, tap.layer, int(positions[0]), rows)
        w.end_step()
    code, r = diff_json(llama / "ref.h5", sparse, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.resid.attn", r["first_divergence"]
    d = r["diagnosis"]
    assert d["class"] == "residual" and "added twice" in d["variant"], d
    assert any("does not record layer 0's attn_norm" in s and "attn_output" in s and "after token_embd" in s
               for s in d["signatures"]), d["signatures"]
    assert sum(f["kind"] == "missing-in-actual" for f in r["findings"]) > 20  # the JSON keeps each tap
    text = run("diff", llama / "ref.h5", sparse, "--model", llama / "llama.gguf").stdout
    assert "structural findings (1)" in text and "taps  recorded in the expected trace only: attn_norm" in text, text


def test_a_tap_whose_inputs_the_trace_lacks_has_no_input_error(llama, tmp_path):
    """Hidden states alone: layer 0's inputs (token_embd) are not recorded, so the input error is
    no measurement, not 0 (blind round 20 read "inputs 0.0"); with token_embd recorded it is 0."""
    hidden = engine_trace(llama, tmp_path, HIDDEN, "norm-weight-dropped")
    code, r = diff_json(llama / "ref.h5", hidden, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["metrics"]["input_nmse"] is None, r["first_divergence"]
    assert "inputs not recorded" in run("diff", llama / "ref.h5", hidden, "--model", llama / "llama.gguf").stdout
    stream = engine_trace(llama, tmp_path, STREAM, "norm-weight-dropped")
    code, r = diff_json(llama / "ref.h5", stream, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["metrics"]["input_nmse"] == 0, r["first_divergence"]


def test_taps_declared_unavailable_are_replayed_and_read_as_one_note(llama, tmp_path):
    """An engine that declares the taps it does not record (/unavailable, one reason for all): the
    block is replayed as for taps merely absent, and the human report says so in one note, not
    one a tap name."""
    from tapdiff_trace import TraceReader, TraceWriter
    hidden = engine_trace(llama, tmp_path, HIDDEN, "norm-weight-dropped")
    declared = tmp_path / "declared.h5"
    keep = {"resid.ffn", "output_norm", "output"}
    with TraceReader(str(llama / "ref.h5")) as ref:
        names = {t.name for t in ref.taps()} - keep
    with TraceReader(str(hidden)) as r, TraceWriter(
            str(declared), producer="external", model_path=r.metadata["model_path"],
            model_sha256=r.metadata["model_sha256"], hparams=r.hparams, precision=r.metadata["precision"],
            prompt_length=r.metadata["prompt_length"], tokens=r.tokens, dims=r.dims,
            unavailable={n: "hidden states only" for n in names}) as w:
        for tap in r.taps():
            positions, rows = r.read(tap.name, tap.layer)
            w.record(tap.name, tap.layer, int(positions[0]), rows)
        w.end_step()
    code, r = diff_json(llama / "ref.h5", declared, "--model", llama / "llama.gguf")
    assert code == 1 and r["diagnosis"]["class"] == "normalization", r["diagnosis"]
    assert not [f for f in r["findings"] if f["kind"] == "missing-in-actual"], r["findings"]
    text = run("diff", llama / "ref.h5", declared, "--model", llama / "llama.gguf").stdout
    assert "structural findings (1)" in text, text
    assert f"not-available  {len(names)} tap names  not compared: the actual trace (external) says: hidden" in text, text


def test_a_decoder_bug_behind_unrecorded_ops_asks_for_the_decoded_weights(tmp_path):
    """The replay through unrecorded ops leaves a decoder's variants out (a matrix each): a wrong
    Q8_0 scale stays unexplained, and the diagnosis names the quantized weights those ops read and
    how to record them as decoded."""
    model = tmp_path / "q8.gguf"
    assert run("fixture", "--arch", "llama", "--type", "Q8_0", "--seed", 4, "-o", model).returncode == 0
    for backend, out, extra in (("reference", "ref.h5", []),
                                ("host", "hidden.h5", ["--inject", "dequant-q8-scale", "--taps", HIDDEN])):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 3, *extra, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "hidden.h5", "--model", model)
    d = r["diagnosis"]
    assert code == 1 and d["class"] == "unexplained", d
    assert any(s.startswith("the ops the trace does not record read ") and "blk.0.attn_q.weight" in s and "(Q8_0)" in s
               and "--weights" in s for s in d["signatures"]), d["signatures"]


def test_logits_alone_replay_two_layers_and_say_why_not_more(llama, tmp_path):
    """A trace of logits alone: the gap is the whole model. Two layers are replayed (each variant in
    both); a third is not (each variant would recompute every layer after it), and the diagnosis
    says what to record instead."""
    logits = engine_trace(llama, tmp_path, "output", "gqa-head-map")
    code, r = diff_json(llama / "ref.h5", logits, "--model", llama / "llama.gguf")
    assert code == 1 and r["diagnosis"]["class"] == "gqa-mapping", r["diagnosis"]
    assert "attn.out in layers 0-1" in r["diagnosis"]["variant"], r["diagnosis"]
    model = tmp_path / "three.gguf"
    assert run("fixture", "--arch", "llama", "--type", "F32", "--n-layer", 3, "--seed", 3, "-o", model).returncode == 0
    for backend, out, extra in (("reference", "ref.h5", []),
                                ("host", "logits.h5", ["--inject", "gqa-head-map", "--taps", "output"])):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 3, *extra, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "logits.h5", "--model", model)
    assert code == 1 and r["diagnosis"]["class"] == "unexplained", r["diagnosis"]
    assert any("they span 3 layers, and the replay runs through at most 2: record the residual stream" in s
               for s in r["diagnosis"]["signatures"]), r["diagnosis"]["signatures"]
    # the ops named once a name, by the layers that hold them (57 full names before)
    assert any("does not record token_embd, output_norm; layers 0-2's attn_norm, attn_q" in s
               for s in r["diagnosis"]["signatures"]), r["diagnosis"]["signatures"]


def test_a_stream_two_layers_on_carries_the_error_it_inherits(tmp_path):
    """Every other layer's stream recorded: blk.2.resid.ffn reads blk.0's through layer 1, which
    neither trace records, and attention there mixes every earlier position. Its error is the one it
    inherits (blind round 21 read later layers as DIVERGED, a second bug that was not there)."""
    model = tmp_path / "four.gguf"
    assert run("fixture", "--arch", "llama", "--type", "F32", "--n-layer", 4, "--seed", 3, "-o", model).returncode == 0
    taps = "blk.0.resid.ffn,blk.2.resid.ffn,output_norm,output"
    for backend, out, extra in (("reference", "ref.h5", []),
                                ("host", "sparse.h5", ["--inject", "causal-mask-off", "--taps", taps])):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 3, *extra, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "sparse.h5", "--model", model)
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.resid.ffn", r["first_divergence"]
    later = {t["tap"]: t for t in r["taps"]}
    assert not later["blk.2.resid.ffn"]["diverged"] and not later["output_norm"]["diverged"], later
