"""How a finding is found and said, whatever the bug: first divergences, faulty expected traces,
profiles, models, coverage, rows that only just pass, noise every layer carries."""
import shutil

import h5py
import numpy as np

from bug_traces import PROMPT, run, read_tap, write_tap, diff_json, replayed_probs, causal_probs
from tapdiff_trace import attention_summary


def test_an_infinity_from_finite_inputs_is_the_first_divergence(llama, tmp_path):
    """An f16 overflow: one Inf in ffn.act, its gate and up finite. Its bound from the inputs
    is infinite too, which must not clear it as an amplified difference."""
    bad = tmp_path / "inf.h5"
    shutil.copy(llama / "eng.h5", bad)
    act = read_tap(bad, "ffn.act", 1)
    act[:, 3] = np.inf
    write_tap(bad, "ffn.act", 1, act)
    code, r = diff_json(llama / "ref.h5", bad)
    assert code == 1 and r["verdict"] == "diverged"
    assert r["first_divergence"]["tap"] == "blk.1.ffn.act" and r["first_divergence"]["position"] == 0
    assert r["diagnosis"]["class"] == "non-finite"
    assert r["first_divergence"]["metrics"]["max_abs"] == "inf"
    assert not any(f["kind"] == "amplified" for f in r["findings"])


def test_another_prompt_is_not_a_generation_loop_bug(llama, tmp_path):
    """A tokenizer that adds or drops BOS gives the engine other prompt tokens: no engine
    diverged, the runs had other inputs (exit 2), and the finding says so."""
    model = llama / "llama.gguf"
    for name, tokens, position in (("extra-bos", "1," + PROMPT, 1), ("no-bos", PROMPT[2:], 0)):
        out = tmp_path / f"{name}.h5"
        assert run("run", "--backend", "host", "-m", model, "--tokens", tokens, "-n", 6, "-o", out).returncode == 0
        code, r = diff_json(llama / "ref.h5", out)
        assert code == 2 and r["verdict"] == "incompatible", r["summary"]
        assert r["findings"][0]["kind"] == "prompt", r["findings"]
        assert f"the runs were given other prompts: at position {position}" in r["findings"][0]["detail"]
        assert r["diagnosis"] is None and not any(f["kind"] == "token-sequence" for f in r["findings"])


def test_a_faulty_expected_trace_does_not_pass_and_is_named(llama, tmp_path):
    """The traces in the other order, or a golden recorded from a faulty build: the actual
    trace is right and the expected one is not. Not a PASS: the expected side's bug, diagnosed."""
    code, r = diff_json(llama / "attn-scale.h5", llama / "ref.h5")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn.probs"
    assert r["diagnosis"]["class"] == "attention-scale" and r["diagnosis"]["in_expected"] is True
    assert any(f["kind"] == "expected-off-its-inputs" for f in r["findings"])
    p = run("diff", llama / "attn-scale.h5", llama / "ref.h5")
    assert "attention-scale (reproduced) in the expected trace" in p.stdout, p.stdout
    p = run("check", "--golden", llama / "attn-scale.h5", "-m", llama / "llama.gguf")
    assert p.returncode == 1, p.stdout
    code, r = diff_json(llama / "ref.h5", llama / "attn-scale.h5")  # the usual order is unchanged
    assert code == 1 and r["diagnosis"]["class"] == "attention-scale" and r["diagnosis"]["in_expected"] is False


def test_a_precision_without_a_profile_is_said(llama, tmp_path):
    labelled = tmp_path / "labelled.h5"
    shutil.copy(llama / "eng.h5", labelled)
    with h5py.File(labelled, "r+") as f:
        f.attrs["precision"] = "int4-magic"
    code, r = diff_json(llama / "ref.h5", labelled)
    assert code == 0 and r["profile"] == "f32"
    assert [f["kind"] for f in r["findings"]] == ["precision"], r["findings"]
    assert '"int4-magic" has no tolerance profile of its own: compared under f32' in r["findings"][0]["detail"]


def test_the_model_is_found_beside_the_traces_or_its_absence_said(llama, tmp_path):
    """Traces record the model path as given (relative to where the run ran): diff finds it
    beside the traces from any directory, and says so when it finds it nowhere."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir = tmp_path / "traces"
    run_dir.mkdir()
    shutil.copy(llama / "llama.gguf", run_dir / "llama.gguf")
    for backend, out, extra in (("reference", "ref.h5", []), ("host", "eng.h5", ["--inject", "attn-scale"])):
        p = run("run", "--backend", backend, "-m", "llama.gguf", "--tokens", PROMPT, "-n", 2, *extra, "-o", out,
                cwd=run_dir)
        assert p.returncode == 0, p.stderr
    code, r = diff_json(run_dir / "ref.h5", run_dir / "eng.h5", cwd=elsewhere)
    assert code == 1 and r["diagnosis"]["class"] == "attention-scale", r["diagnosis"]
    (run_dir / "llama.gguf").unlink()
    code, r = diff_json(run_dir / "ref.h5", run_dir / "eng.h5", cwd=elsewhere)
    assert code == 1 and r["diagnosis"]["class"] == "unexplained"
    missing = [f for f in r["findings"] if f["kind"] == "no-model"]
    assert missing and "the traces' model llama.gguf was not found" in missing[0]["detail"], r["findings"]


def test_legitimate_pairs_carry_no_coverage_findings(llama, tmp_path):
    """Runs of other lengths, --logits all against last, and layer windows whose attention rows
    coincide: no missing-positions, position-shift or layer-shift finding."""
    model = llama / "llama.gguf"
    short, logits_all = tmp_path / "short.h5", tmp_path / "logits-all.h5"
    assert run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 3, "-o", short).returncode == 0
    assert run("run", "-m", model, "--tokens", PROMPT, "-n", 6, "--logits", "all", "-o", logits_all).returncode == 0
    coverage = {"missing-positions", "position-shift", "layer-shift"}
    for expected, actual in ((llama / "ref.h5", short), (logits_all, llama / "eng.h5")):
        code, r = diff_json(expected, actual)
        assert code == 0 and not coverage & {f["kind"] for f in r["findings"]}, r["findings"]
    windows = []
    for layer in (0, 1):
        out = tmp_path / f"layer{layer}.h5"
        assert run("run", "-m", model, "--tokens", PROMPT, "-n", 2, "--layers", layer, "--taps", "*attn.probs*",
                   "-o", out).returncode == 0
        windows.append(out)
    code, r = diff_json(*windows)  # no tap in common: the generated tokens are what is compared
    assert code == 0 and not coverage & {f["kind"] for f in r["findings"]}, r["findings"]


def test_rows_that_pass_only_just_are_not_called_intact(llama, tmp_path):
    """A bug acting at every position, under the threshold on the prompt and over it from the
    first decode step on (an epsilon outside the square root, say): the prompt passes, but it is
    not intact, and the signatures must not send anyone to decode-only code."""
    bad = tmp_path / "under.h5"
    shutil.copy(llama / "eng.h5", bad)
    y = read_tap(bad, "attn_norm", 0).astype(np.float64)
    prompt = len(PROMPT.split(","))
    # nmse ~1e-10 on the prompt (under the f32 floor for suspects), ~9e-8 after it
    scale = np.where(np.arange(len(y)) < prompt, 1 + 1e-5, 1 + 3e-4)[:, None]
    write_tap(bad, "attn_norm", 0, y * scale)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["position"] == prompt, r["first_divergence"]
    signatures = " ".join(r["diagnosis"]["signatures"])
    assert "intact" not in signatures and "not cleanly" in signatures, signatures


def test_one_hot_rows_are_not_called_16_bit_values(llama, tmp_path):
    """Attention that puts all its weight on one key holds only 0 and 1, which every float type
    holds: that is no sign of values stored in 16 bits."""
    bad = tmp_path / "onehot.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 0)
    probs[3] = 0
    probs[3][:, 0] = 1
    write_tap(bad, "attn.probs", 0, probs)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn.probs", r["first_divergence"]
    signatures = " ".join(r["diagnosis"]["signatures"])
    assert "float16" not in signatures, signatures


def test_an_unexplained_op_on_a_quantized_weight_asks_for_the_decoded_weights(tmp_path):
    """A decoder bug inside a kernel shows first where the kernel's output is tapped, and no
    replay from the trace's activations names it: the report says how to compare the decoded
    weights, until both traces hold them."""
    model = tmp_path / "q8.gguf"
    assert run("fixture", "--arch", "llama", "--type", "Q8_0", "-o", model).returncode == 0
    for weights in ([], ["--weights"]):
        for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
            p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 2, *weights,
                    "-o", tmp_path / out)
            assert p.returncode == 0, p.stderr
        rows = read_tap(tmp_path / "eng.h5", "attn_q", 0)
        rows[:, ::7] *= -1  # a few elements of every row wrong, as a misdecoded block leaves them
        write_tap(tmp_path / "eng.h5", "attn_q", 0, rows)
        code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
        assert code == 1 and r["first_divergence"]["tap"] == "blk.0.attn_q", r["first_divergence"]
        asked = [s for s in r["diagnosis"]["signatures"] if "record --weights" in s]
        if weights:
            assert not asked, r["diagnosis"]["signatures"]
        else:
            assert r["diagnosis"]["class"] == "unexplained" and asked and "Q8_0" in asked[0], r["diagnosis"]
    # A producer tapdiff cannot run with --weights is not told to (blind round 12).
    for producer, words in (("transformers", "transformers records no weights, so its Q8_0 decoding stays a suspect"),
                            ("external", "record it as your engine decodes it (`weight.blk.0.attn_q.weight` rows")):
        for name in ("ref.h5", "eng.h5"):  # the traces as they were, without weights
            p = run("run", "--backend", "host" if name == "eng.h5" else "reference", "-m", model, "--tokens", PROMPT,
                    "-n", 2, "-o", tmp_path / name)
            assert p.returncode == 0, p.stderr
        write_tap(tmp_path / "eng.h5", "attn_q", 0, rows)
        with h5py.File(tmp_path / "eng.h5", "r+") as f:
            f.attrs["producer"] = producer
        code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", model)
        assert code == 1 and any(words in s for s in r["diagnosis"]["signatures"]), r["diagnosis"]["signatures"]
        assert not any("tapdiff run --weights" in s for s in r["diagnosis"]["signatures"]), r["diagnosis"]["signatures"]


def test_an_intact_first_position_before_attention_does_not_point_at_rope(llama, tmp_path):
    """A misdecoded embedding row from position 1 on: position 0 is intact, but RoPE, the attention
    scale and the KV cache come after token_embd and cannot be why. Blind round 2, case 27."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    rows = read_tap(bad, "token_embd", -1)
    rows[1:, ::5] += 0.5
    write_tap(bad, "token_embd", -1, rows)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and (r["first_divergence"]["tap"], r["first_divergence"]["position"]) == ("token_embd", 1)
    signatures = " ".join(r["diagnosis"]["signatures"])
    assert "position 0 intact" in signatures and "RoPE" not in signatures, signatures


def test_a_slightly_wrong_row_is_not_called_a_permutation_or_a_scale(llama, tmp_path):
    """Attention rows 5e-3 off (a cache overlapping another layer's, blind round 2 case 20) sort
    into nearly the expected values, and fit a scale of nearly 1: neither says anything."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = read_tap(bad, "attn.probs", 1).astype(np.float64)
    noise = 1 + 0.005 * np.random.default_rng(0).standard_normal(probs.shape)
    probs[6:] *= noise[6:]
    probs[6:] /= probs[6:].sum(axis=-1, keepdims=True)
    write_tap(bad, "attn.probs", 1, probs)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    assert code == 1 and r["first_divergence"]["tap"] == "blk.1.attn.probs", r["first_divergence"]
    signatures = " ".join(r["diagnosis"]["signatures"])
    assert "permutation" not in signatures and "scale factor" not in signatures, signatures


def test_noise_every_layer_carries_is_not_read_as_the_bug(tmp_path):
    """An engine with 8-bit activations (precision q8, as llama.cpp's CPU backend) leaves every
    layer's rows at a good part of the threshold. Rows before the first diverged one that are no
    further off than the same tap of another layer are that noise: a decode-only bug keeps the
    signature saying the prompt is intact. Said "not cleanly" before (llama.cpp, blind round 8)."""
    model = tmp_path / "llama.gguf"
    assert run("fixture", "--arch", "llama", "--type", "Q4_0", "--seed", 3, "-o", model).returncode == 0
    for backend, out, precision in (("reference", "ref.h5", "f32"), ("host", "eng.h5", "q8")):
        p = run("run", "--backend", backend, "--precision", precision, "-m", model, "--tokens", PROMPT, "-n", 6,
                "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    bad = tmp_path / "eng.h5"
    prompt = len(PROMPT.split(","))
    act = read_tap(bad, "ffn.act", 1)
    act[prompt:] *= 1.1
    write_tap(bad, "ffn.act", 1, act)
    code, r = diff_json(tmp_path / "ref.h5", bad, "--model", model)
    first = r["first_divergence"]
    assert code == 1 and (first["tap"], first["position"]) == ("blk.1.ffn.act", prompt), first
    tap = next(t for t in r["taps"] if t["tap"] == "blk.1.ffn.act")
    before = max(row["nmse"] for row in tap["rows"] if row["position"] < prompt)
    assert before > 1e-2 * tap["threshold_nmse"], before  # the old rule's "not cleanly"
    signatures = " ".join(r["diagnosis"]["signatures"])
    assert "not cleanly" not in signatures and "the prompt (positions 0..5) is intact" in signatures, signatures


def test_runners_up_come_closer_than_the_correct_computation(llama, tmp_path):
    """Rows scaled and shifted that nothing reproduces: every runner-up listed is closer to them
    than the correct computation; one no closer explains nothing (blind round 12: 16-bit roundings
    listed at the baseline's residual)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    rows = read_tap(bad, "attn_q", 1)
    rows[1:] = rows[1:] * 0.5 + 0.25 * np.sin(np.arange(rows.shape[1]))
    write_tap(bad, "attn_q", 1, rows)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf")
    d = r["diagnosis"]
    assert code == 1 and d["class"] == "unexplained" and d["baseline_residual"] > 0, d
    assert all(u["residual"] < 0.9 * d["baseline_residual"] for u in d["runners_up"]), d["runners_up"]


def test_all_finds_a_bug_under_an_earlier_roots_error(llama, tmp_path):
    """attn_output transposed in every layer (a root at layer 0), and layer 1's attention scaled by
    1/d: its rows carry the first bug's error, larger than its own, so the jump test lets them
    pass; replayed from the trace's own inputs they are not what the correct op gives. --all names
    both. Was missed (blind round 11: 7 of 24 bugs hidden so)."""
    bad = tmp_path / "eng.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6,
            "--inject", "weights-transposed", "-o", bad)
    assert p.returncode == 0, p.stderr
    write_tap(bad, "attn.probs", 1, replayed_probs(bad, 1, scores=lambda dots, d: dots / d))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    assert code == 1 and [(root["tap"], root["class"]) for root in r["roots"]] == [
        ("blk.0.attn_output", "matmul-layout"), ("blk.1.attn.probs", "attention-scale")], r["roots"]


def test_one_bug_tied_in_two_layers_at_two_taps_is_one_root(llama, tmp_path):
    """Decode steps that see key 0 only, in both layers: tied (a mask, a cache read over one slot)
    at layer 0's probabilities, and at layer 1's attn.out, where another variant of the same two
    classes heads the tie. The same classes tie: one bug, one root (blind round 11)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    prompt = len(PROMPT.split(","))
    probs = read_tap(bad, "attn.probs", 0)
    probs[prompt:] = 0
    probs[prompt:, :, 0] = 1
    write_tap(bad, "attn.probs", 0, probs)
    out, v = read_tap(bad, "attn.out", 1), read_tap(bad, "attn_v", 1)
    out[prompt:] = np.repeat(v[0].reshape(2, 16), 2, axis=0).reshape(-1)  # each query head reads its kv head's key 0
    write_tap(bad, "attn.out", 1, out)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    assert code == 1 and [root["tap"] for root in r["roots"]] == ["blk.0.attn.probs"], r["roots"]
    assert "blk.1.attn.out" in r["roots"][0]["explained"], r["roots"][0]


def test_the_attention_summary_is_its_probabilities_root(llama, tmp_path):
    """A producer deriving attn.probs.summary from its own (wrong) probabilities: the summary is
    those rows again, never a root of its own (blind round 14: a second root beside them)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    probs = replayed_probs(bad, 1, window=3)
    write_tap(bad, "attn.probs", 1, probs)
    write_tap(bad, "attn.probs.summary", 1, attention_summary(probs, 0))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    assert code == 1 and [root["tap"] for root in r["roots"]] == ["blk.1.attn.probs"], r["roots"]


def test_all_confirms_a_row_under_the_threshold_after_an_earlier_root(llama, tmp_path):
    """A window nobody configured on layer 0's attention (a root), and layer 0's activation off by
    a few 1e-5 (nmse about 4e-10, under the f32 threshold, over the floor): --all confirms the
    second by its replay too, not only the first divergence's (blind round 14: it was dropped)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    write_tap(bad, "attn.probs", 0, replayed_probs(bad, 0, window=3))
    act = read_tap(bad, "ffn.act", 0)
    act *= 1 + 2e-5 * np.random.default_rng(3).standard_normal(act.shape)
    write_tap(bad, "ffn.act", 0, act)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    assert code == 1 and [root["tap"] for root in r["roots"]] == ["blk.0.attn.probs", "blk.0.ffn.act"], \
        [(root["tap"], root["class"]) for root in r["roots"]]


def test_all_with_another_models_file_says_the_replay_was_skipped(tmp_path):
    """--all given a model file other than the traces' (its sha256): the roots are found and each
    says its replay was skipped, as the first divergence does, never an exit 2 (a root's decoder
    was being looked up in that file)."""
    model, other = tmp_path / "q8.gguf", tmp_path / "other.gguf"
    assert run("fixture", "--arch", "llama", "--type", "Q8_0", "-o", model).returncode == 0
    assert run("fixture", "--arch", "llama", "--type", "Q8_0", "--seed", 9, "-o", other).returncode == 0
    for backend, out, extra in (("reference", "ref.h5", ()), ("host", "eng.h5", ("--inject", "dequant-q8-scale"))):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 4, *extra, "-o", tmp_path / out)
        assert p.returncode == 0, p.stderr
    code, r = diff_json(tmp_path / "ref.h5", tmp_path / "eng.h5", "--model", other, "--all")
    assert code == 1 and r["roots"], r
    assert any("hypothesis replay skipped" in s and "sha256" in s for s in r["diagnosis"]["signatures"]), r["diagnosis"]



def roots_of(r):
    """{root tap: (class, the taps it explains)} of an --all report."""
    return {root["tap"]: (root["class"], root["explained"]) for root in r["roots"]}


def test_a_copy_wrong_before_its_source_is_its_own_root(llama, tmp_path):
    """The last layer's residual add dropped (resid.ffn holds ffn_down's row) under a RoPE pairing
    bug that leaves position 0 right: resid.ffn copies ffn_down, which carries the RoPE root's
    error, but it goes wrong at position 0, where ffn_down is right. --all had filed it under
    the RoPE root (blind round 19)."""
    bad = tmp_path / "eng.h5"
    p = run("run", "--backend", "host", "-m", llama / "llama.gguf", "--tokens", PROMPT, "-n", 6,
            "--inject", "rope-wrong-pairing", "-o", bad)
    assert p.returncode == 0, p.stderr
    write_tap(bad, "resid.ffn", 1, read_tap(bad, "ffn_down", 1))
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    roots = roots_of(r)
    assert code == 1 and roots.get("blk.1.resid.ffn", ("",))[0] == "residual", r["roots"]
    assert r["roots"][0]["class"] == "rope", r["roots"]


def test_a_norm_skipped_on_an_input_carrying_another_root_is_its_own_root(llama, tmp_path):
    """Layer 1's attn_norm skipped in decode steps (its input passed through) under an attention
    scale bug whose error that input carries: a copy of a tap that only carries another kind of
    root's error is a bug of its own. --all had filed it under the scale's root (blind round 19:
    gemma3's K norm skipped in decode, under a Q5_K decoder's root)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "attn-scale.h5", bad)
    prompt = len(PROMPT.split(","))
    norm = read_tap(bad, "attn_norm", 1)
    norm[prompt:] = read_tap(bad, "resid.ffn", 0)[prompt:]
    write_tap(bad, "attn_norm", 1, norm)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    roots = roots_of(r)
    assert code == 1 and r["roots"][0]["class"] == "attention-scale", r["roots"]
    assert roots.get("blk.1.attn_norm", ("",))[0] == "normalization", r["roots"]


def test_attention_over_a_cache_row_never_written_is_the_caches_root(llama, tmp_path):
    """The prompt's last K/V row never written to the cache: decode steps attend over a zero row.
    Their attention, computed right over the cache as read back, ties with a cache written a slot
    early; the tie's carried reading joins it to the cache's root, where a second root had named
    the slot (blind round 19)."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    prompt = len(PROMPT.split(","))
    layer, kv_of_head = 1, [0, 0, 1, 1]
    k, v = read_tap(bad, "kv.k", layer), read_tap(bad, "kv.v", layer)
    k[prompt - 1], v[prompt - 1] = 0, 0
    write_tap(bad, "kv.k", layer, k)
    write_tap(bad, "kv.v", layer, v)
    q = read_tap(bad, "attn_q.rope", layer)
    probs, out = read_tap(bad, "attn.probs", layer), read_tap(bad, "attn.out", layer)
    n = q.shape[0]
    k, v = k.reshape(n, -1), v.reshape(n, -1)
    d = k.shape[1] // 2
    replayed = causal_probs(q.reshape(n, -1), k, 4, probs.shape[2], kv_of_head)
    out = out.reshape(n, -1)
    for p in range(prompt, n):
        for h, g in enumerate(kv_of_head):
            out[p, h * d:(h + 1) * d] = replayed[p, h, :p + 1] @ v[:p + 1, g * d:(g + 1) * d]
    probs[prompt:] = replayed[prompt:]
    write_tap(bad, "attn.probs", layer, probs)
    write_tap(bad, "attn.out", layer, out)
    code, r = diff_json(llama / "ref.h5", bad, "--model", llama / "llama.gguf", "--all")
    cache = [root for root in r["roots"] if root["tap"] in (f"blk.{layer}.kv.k", f"blk.{layer}.kv.v")]
    assert code == 1 and cache and cache[0]["class"] == "kv-cache", r["roots"]
    assert f"blk.{layer}.attn.out" in cache[0]["explained"], r["roots"]
    assert all(root["tap"] != f"blk.{layer}.attn.out" for root in r["roots"]), r["roots"]
