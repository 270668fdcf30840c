"""Lockstep mode and `diff --all` end to end: several faults injected at once are each reported
at their own tap, layer and class in one run, where first-divergence mode reports only the first."""
import json
import os
import subprocess

import h5py
import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = "1,70,200,33"
N_PREDICT = 6


def run(*args, code=None):
    p = subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=120)
    if code is not None:
        assert p.returncode == code, f"exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


def fixture_with_reference(tmp_path, arch, seed):
    model, ref = tmp_path / f"{arch}.gguf", tmp_path / f"{arch}-ref.h5"
    run("fixture", "--arch", arch, "--type", "Q8_0", "--seed", seed, "-o", model, code=0)
    run("run", "--backend", "reference", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "-o", ref, code=0)
    return model, ref


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    return fixture_with_reference(tmp_path_factory.mktemp("qwen2"), "qwen2", 1)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return fixture_with_reference(tmp_path_factory.mktemp("llama"), "llama", 2)


def diff_json(expected, actual, *flags, code=1):
    return json.loads(run("diff", expected, actual, "--format", "json", *flags, code=code).stdout)


def found(report):
    """(tap, layer, class) of every root and every tap a root explains, with the root's class."""
    out = set()
    for root in report["roots"]:
        out.add((root["name"], root["layer"], root["class"]))
        for tap in root["explained"]:
            name, layer = (tap.split(".", 2)[2], int(tap.split(".")[1])) if tap.startswith("blk.") else (tap, -1)
            out.add((name, layer, root["class"]))
    return out


THREE_FAULTS = "bias-dropped,rope-wrong-pairing,lm-head-op-n"
# Every tap each fault breaks at its own op, with the class the diagnosis must give it.
THREE_FAULTS_EXPECTED = {
    *((tap, layer, "bias") for tap in ("attn_q", "attn_k", "attn_v") for layer in (0, 1)),
    *((tap, layer, "rope") for tap in ("attn_q.rope", "attn_k.rope") for layer in (0, 1)),
    ("output", -1, "matmul-layout"),
}


def test_three_faults_in_one_lockstep_run(qwen2, tmp_path):
    model, ref = qwen2
    actual = tmp_path / "lockstep.h5"
    out = run("run", "--backend", "host", "-m", model, "--lockstep", ref, "--inject", THREE_FAULTS,
              "-o", actual, code=0).stdout
    # The tokens come from the reference trace: the run follows it to the end.
    with h5py.File(ref) as f:
        assert out.splitlines()[0] == "tokens: " + ",".join(str(t) for t in f["tokens"][:])
    with h5py.File(actual) as f:
        assert f.attrs["lockstep_source"] == str(ref)

    report = diff_json(ref, actual)  # lockstep detected from the trace's metadata
    assert report["mode"] == "lockstep"
    assert found(report) == THREE_FAULTS_EXPECTED
    for root in report["roots"]:
        assert root["diagnosis"]["variant"], root  # a replayed hypothesis reproduces each one
    # Every position is compared: the tokens agree because every op continued from the reference.
    assert report["compared_positions"] == len(report["expected"]["tokens"])
    assert report["first_divergence"]["tap"] == "blk.0.attn_q"

    # One finding per bug, whatever the number of layers it shows in.
    assert [(r["tap"], r["class"]) for r in report["roots"]] == [
        ("blk.0.attn_q", "bias"), ("blk.0.attn_q.rope", "rope"), ("output", "matmul-layout")]
    text = run("diff", ref, actual, code=1).stdout
    assert "findings: 3 independent roots · lockstep" in text
    assert "attn_k in layers 0-1" in text


def test_first_divergence_mode_reports_only_the_first(qwen2, tmp_path):
    model, ref = qwen2
    actual = tmp_path / "normal.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--inject", THREE_FAULTS,
        "-o", actual, code=0)
    report = diff_json(ref, actual)
    assert report["mode"] == "first"
    assert [(r["tap"], r["class"]) for r in report["roots"]] == [("blk.0.attn_q", "bias")]
    # Downstream of the bias error the RoPE fault never jumps over its inputs' error; --all replays
    # the rows that carry it from their own inputs and finds all three.
    assert [(r["tap"], r["class"]) for r in diff_json(ref, actual, "--all")["roots"]] == [
        ("blk.0.attn_q", "bias"), ("blk.0.attn_q.rope", "rope"), ("output", "matmul-layout")]


def test_two_faults_in_one_lockstep_run(llama, tmp_path):
    model, ref = llama
    actual = tmp_path / "two.h5"
    run("run", "--backend", "host", "-m", model, "--lockstep", ref, "--inject", "attn-scale,weights-transposed",
        "-o", actual, code=0)
    report = diff_json(ref, actual)
    assert [(r["tap"], r["class"]) for r in report["roots"]] == [
        ("blk.0.attn.probs", "attention-scale"), ("blk.0.attn_output", "matmul-layout")]
    # attn.out comes out of the same kernel as attn.probs, and attn.probs.summary is reduced from
    # it: explained by it, not roots of their own;
    # layer 1 shows the same two bugs again.
    probs, layout = report["roots"]
    assert sorted(probs["explained"]) == ["blk.0.attn.out", "blk.0.attn.probs.summary", "blk.1.attn.out",
                                          "blk.1.attn.probs", "blk.1.attn.probs.summary"]
    assert layout["explained"] == ["blk.1.attn_output"]


@pytest.mark.parametrize("precision", ["f32", "f16"])
def test_clean_lockstep_run_passes(llama, tmp_path, precision):
    model, ref = llama
    actual = tmp_path / f"clean-{precision}.h5"
    run("run", "--backend", "host", "-m", model, "--lockstep", ref, "--precision", precision, "-o", actual, code=0)
    report = diff_json(ref, actual, code=0)
    assert report["verdict"] == "pass" and report["roots"] == []


def test_fault_on_a_cache_view_still_shows(qwen2, tmp_path):
    """kv.k is a view of the cache slot: a stuck write cursor shows in attention, at its own op."""
    model, ref = qwen2
    actual = tmp_path / "kv.h5"
    run("run", "--backend", "host", "-m", model, "--lockstep", ref, "--inject", "kv-append-offset",
        "-o", actual, code=0)
    roots = diff_json(ref, actual)["roots"]
    assert [(r["tap"], r["class"], r["position"]) for r in roots] == [("blk.0.attn.probs", "kv-cache", 4)]
    assert "blk.1.attn.probs" in roots[0]["explained"]


def test_diff_all_groups_by_independent_root(qwen2, tmp_path):
    model, ref = qwen2
    actual = tmp_path / "all.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT,
        "--inject", "norm-weight-dropped,lm-head-op-n", "-o", actual, code=0)
    first = diff_json(ref, actual)
    assert [(r["tap"], r["class"]) for r in first["roots"]] == [("blk.0.attn_norm", "normalization")]
    report = diff_json(ref, actual, "--all")
    assert report["mode"] == "all"
    # Every norm op drops its weight: each is wrong on its own inputs, and every one is reproduced
    # by the same hypothesis, so they are one root. The head's layout bug is another although its
    # input already carries the norm error: replayed from its own inputs the op is still wrong.
    # Nothing downstream becomes a root.
    assert [(r["tap"], r["class"], r["explained"]) for r in report["roots"]] == [
        ("blk.0.attn_norm", "normalization", ["blk.0.ffn_norm", "blk.1.attn_norm", "blk.1.ffn_norm", "output_norm"]),
        ("output", "matmul-layout", [])]
    for fmt, marker in (("text", "findings: 2 independent roots"), ("md", "**Findings: 2 independent roots"),
                        ("junit", 'classname="tapdiff.findings" name="2 output"'), ("html", 'id="roots"')):
        out = run("diff", ref, actual, "--all", "--format", fmt, code=1).stdout
        assert marker in out and "blk.1.attn_norm" in out and "matmul-layout" in out, fmt


def test_diff_all_groups_one_kernels_outputs(llama, tmp_path):
    model, ref = llama
    actual = tmp_path / "gqa.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--inject", "gqa-head-map",
        "-o", actual, code=0)
    roots = diff_json(ref, actual, "--all")["roots"]
    assert roots[0]["tap"] == "blk.0.attn.probs" and roots[0]["class"] == "gqa-mapping"
    # attn.out diverges at position 0 where attn.probs does not (one key, the wrong head's value):
    # the same kernel, the same class, so the same root; layer 1's attn.out is the same bug again.
    assert len(roots) == 1
    assert {"blk.0.attn.out", "blk.1.attn.out"} <= set(roots[0]["explained"]), roots[0]


def test_lockstep_refuses_another_model(qwen2, llama, tmp_path):
    _, ref = qwen2
    other, _ = llama
    p = run("run", "--backend", "host", "-m", other, "--lockstep", ref, "-o", tmp_path / "x.h5", code=2)
    assert str(ref) in p.stderr and "model_sha256" in p.stderr and "another model" in p.stderr


def test_lockstep_needs_the_traces_tokens(qwen2, tmp_path):
    model, ref = qwen2
    p = run("run", "--backend", "host", "-m", model, "--lockstep", ref, "--tokens", PROMPT, code=2)
    assert "--lockstep" in p.stderr and "--tokens" in p.stderr
    p = run("run", "--backend", "reference", "-m", model, "--lockstep", ref, code=2)
    assert "--lockstep" in p.stderr


def test_lockstep_needs_every_tap_of_the_source(qwen2, tmp_path):
    model, _ = qwen2
    partial = tmp_path / "partial.h5"
    run("run", "--backend", "reference", "-m", model, "--tokens", PROMPT, "-n", 2, "--taps", "blk.*.attn_q",
        "-o", partial, code=0)
    p = run("run", "--backend", "host", "-m", model, "--lockstep", partial, code=2)
    assert str(partial) in p.stderr and "token_embd" in p.stderr
    one_layer = tmp_path / "one-layer.h5"
    run("run", "--backend", "reference", "-m", model, "--tokens", PROMPT, "-n", 2, "--layers", "0", "-o", one_layer,
        code=0)
    p = run("run", "--backend", "host", "-m", model, "--lockstep", one_layer, "-o", tmp_path / "x.h5", code=2)
    assert "the lockstep source was recorded with --layers 0 (it leaves out blk.1." in p.stderr, p.stderr
    assert not (tmp_path / "x.h5").exists()
    # Filters that leave nothing out are no reason to refuse; --taps that do are refused before -o.
    covering = tmp_path / "covering.h5"
    run("run", "--backend", "reference", "-m", model, "--tokens", PROMPT, "-n", 2, "--layers", "0-1",
        "--taps", "!*.attn.probs", "-o", covering, code=0)
    run("run", "--backend", "host", "-m", model, "--lockstep", covering, "-o", tmp_path / "y.h5", code=0)
    kept = tmp_path / "kept.h5"
    kept.write_bytes(b"an earlier trace")
    p = run("run", "--backend", "host", "-m", model, "--lockstep", partial, "-o", kept, code=2)
    assert "--taps 'blk.*.attn_q' (it leaves out token_embd)" in p.stderr, p.stderr
    assert kept.read_bytes() == b"an earlier trace"


def test_lockstep_needs_tokens(qwen2, tmp_path):
    model, ref = qwen2
    empty = tmp_path / "no-tokens.h5"
    empty.write_bytes(ref.read_bytes())
    with h5py.File(empty, "r+") as f:
        f.attrs["prompt_length"] = 0
        f.attrs["committed_tokens"] = 0
    p = run("run", "--backend", "host", "-m", model, "--lockstep", empty, code=2)
    assert str(empty) in p.stderr and "tokens" in p.stderr


def test_a_source_interrupted_before_its_first_step_is_named_as_such(llama, tmp_path):
    """A lockstep source with no taps because its run was killed before committing a step is not
    a filtered trace: the error says which."""
    model, _ = llama
    source = tmp_path / "interrupted.h5"
    run("run", "-m", model, "--tokens", PROMPT, "-n", 2, "--taps", "!*", "-o", source, code=0)
    with h5py.File(source, "r+") as f:
        f.attrs["complete"] = 0  # as a killed run leaves it: nothing committed, never closed
    p = run("run", "--backend", "host", "-m", model, "--lockstep", source, "-o", tmp_path / "x.h5", code=2)
    assert "the lockstep source holds none: its run was interrupted before its first step" in p.stderr, p.stderr
    assert "without filters" not in p.stderr and not (tmp_path / "x.h5").exists()
