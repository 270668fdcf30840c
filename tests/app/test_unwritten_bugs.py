"""Bugs outside the fault catalogue, written into traces by hand as a new user found them: the
diff must find each where it starts and never name a wrong class (a wrong class is a false
lead; "unexplained" is not)."""
import json
import os
import shutil
import subprocess

import h5py
import numpy as np
import pytest

from tapdiff_trace import stack_rows

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = "1,70,200,33,5,91"


def run(*args, cwd=None):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def tap_slot(f, name, layer):
    stack = f["taps"][name]
    slot = list(stack.attrs["layers"]).index(layer)
    rows, _, batch = f["committed"][stack.attrs["index"][slot]]
    return stack, slot, int(rows), int(batch)


def read_tap(path, name, layer):
    with h5py.File(path, "r") as f:
        stack, slot, rows, batch = tap_slot(f, name, layer)
        return stack_rows(stack, slot, 0, rows, batch)


def write_tap(path, name, layer, values):
    with h5py.File(path, "r+") as f:
        stack, slot, rows, batch = tap_slot(f, name, layer)
        values = np.asarray(values, np.float32)
        if batch:
            stack["batch"][slot, :batch] = values[:batch]
        if rows > batch:
            stack["data"][batch:rows, slot] = values[batch:rows]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    model = d / "llama.gguf"
    assert run("fixture", "--arch", "llama", "--type", "F32", "--seed", 3, "-o", model).returncode == 0
    for backend, out, extra in (("reference", "ref.h5", []), ("host", "eng.h5", []),
                                ("host", "attn-scale.h5", ["--inject", "attn-scale"])):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 6, *extra, "-o", d / out)
        assert p.returncode == 0, p.stderr
    return d


def diff_json(expected, actual, *args, cwd=None):
    p = run("diff", expected, actual, "--format", "json", *args, cwd=cwd)
    return p.returncode, json.loads(p.stdout)


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


@pytest.mark.parametrize("dtype,name,profile", [("float16", "float16", "f16"), ("bfloat16", "bfloat16", "bf16")])
def test_values_stored_in_16_bits_under_an_f32_label_are_named(llama, tmp_path, dtype, name, profile):
    """A producer that stores its values in 16 bits and labels its trace f32: the diff says so,
    not "a scale factor"."""
    stored = tmp_path / f"{dtype}.h5"
    shutil.copy(llama / "eng.h5", stored)
    rows = read_tap(stored, "token_embd", -1).astype(np.float32)
    if dtype == "float16":
        rows = rows.astype(np.float16).astype(np.float32)
    else:  # bfloat16: the high 16 bits, rounded to nearest even
        bits = rows.view(np.uint32).astype(np.uint64)
        rows = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    write_tap(stored, "token_embd", -1, rows)
    code, r = diff_json(llama / "ref.h5", stored)
    assert code == 1 and r["first_divergence"]["tap"] == "token_embd"
    assert r["diagnosis"]["class"] == "unexplained"
    wanted = f"every actual value is a {name} number and not every expected one"
    assert any(wanted in s for s in r["diagnosis"]["signatures"]), r["diagnosis"]["signatures"]
    assert any(f"--profile {profile}" in s for s in r["diagnosis"]["signatures"])


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


def test_rows_that_pass_only_just_are_not_called_intact(llama, tmp_path):
    """A bug acting at every position, under the threshold on the prompt and over it from the
    first decode step on (an epsilon outside the square root, say): the prompt passes, but it is
    not intact, and the signatures must not send anyone to decode-only code."""
    bad = tmp_path / "under.h5"
    shutil.copy(llama / "eng.h5", bad)
    y = read_tap(bad, "attn_norm", 0).astype(np.float64)
    prompt = len(PROMPT.split(","))
    scale = np.where(np.arange(len(y)) < prompt, 1 + 7e-5, 1 + 3e-4)[:, None]  # nmse ~5e-9, then ~9e-8
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
