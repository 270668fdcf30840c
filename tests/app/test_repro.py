"""`tapdiff repro` and `tapdiff replay`: for every catalogue fault (on the first self-test fixture
model it applies to), the repro directory's engine replay fails (exit 1) while the fault is in the engine and passes on
a clean engine, and its numpy replay fails on the recorded output and passes on a clean engine's
output — with the model and the traces moved away (the directory is all they need)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from tapdiff_trace import stack_rows

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = ["--tokens", "1,20,40,60,80", "-n", "4"]
# The self-test's models (fixtures/fault_expectations.cpp), in its order: each fault runs on the
# first one it applies to.
MODELS = ["llama-q8_0", "qwen2-f16", "qwen3-f32", "llama3-q4_0", "gemma2-q8_0", "gemma3-f16", "phi3-q8_0",
          "qwen3moe-q8_0", "smollm3-q4_k", "mistral3-f32", "granite-q5_1"]
# A fault only a chunked prefill exposes runs with one.
RUN_OPTIONS = {"kv-chunk-offset": ["--prefill-chunk", "2"]}


def tapdiff(*args, code=None):
    p = subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)
    if code is not None:
        assert p.returncode == code, f"tapdiff {' '.join(map(str, args))}: exit {p.returncode}\n{p.stdout}{p.stderr}"
    return p


def python(*args):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=120)


def catalogue():
    lines = [line.split() for line in tapdiff("faults").stdout.splitlines() if line and not line[0].isspace()]
    return [fields[0] for fields in lines if fields[0] != "fault"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """{name: (model, reference trace with weights)}, the models written by `selftest --work-dir`."""
    d = tmp_path_factory.mktemp("models")
    tapdiff("selftest", "--work-dir", d, "--fault", "kv-stuck-length", "--precision", "f32", code=0)
    out = {}
    for name in MODELS:
        model, ref = d / f"{name}.gguf", d / f"{name}-ref.h5"
        tapdiff("run", "-m", model, *PROMPT, "--weights", "-o", ref, code=0)
        out[name] = (model, ref)
    return d, out


def rows_of(trace, name, layer):
    """{position: row} of a tap, read with h5py (docs/trace-schema.md)."""
    with h5py.File(trace, "r", locking=False) as f:
        for stack in f["taps"].values():
            if stack.attrs["name"] != name or layer not in list(stack.attrs["layers"]):
                continue
            s = list(stack.attrs["layers"]).index(layer)
            rows, n_runs, batch = f["committed"][stack.attrs["index"][s]]
            if rows == 0:
                continue
            data, runs = stack_rows(stack, s, 0, rows, batch), stack["runs"][:n_runs, s]
            ends = list(runs[1:, 0]) + [rows]
            return {int(p + i): data[r + i] for (r, p), end in zip(runs, ends) for i in range(end - r)}
    return {}


def test_every_fault_reproduces_without_the_model_and_passes_when_fixed(models, tmp_path):
    home, all_models = models
    ran, problems = 0, []
    for fault in catalogue():
        options = RUN_OPTIONS.get(fault, [])
        faulty, clean = tmp_path / f"{fault}.h5", tmp_path / f"{fault}-clean.h5"
        for model, ref in (all_models[name] for name in MODELS):
            if tapdiff("run", "--backend", "host", "-m", model, *PROMPT, "--weights", *options, "--inject", fault,
                       "-o", faulty).returncode == 0:
                break
        else:
            problems.append(f"{fault}: applies to neither self-test model")
            continue
        ran += 1
        tapdiff("run", "--backend", "host", "-m", model, *PROMPT, "--weights", *options, "-o", clean, code=0)
        repro = tmp_path / f"repro-{fault}"
        written = tapdiff("repro", ref, faulty, "-o", repro)
        if written.returncode != 0 or "the engine diverges again" not in written.stdout:
            problems.append(f"{fault}: repro: {written.stdout}{written.stderr}")
            continue
        manifest = json.loads((repro / "repro.json").read_text())
        tap, name, layer = manifest["finding"]["tap"], manifest["finding"]["name"], manifest["finding"]["layer"]
        # The clean engine's output of the finding's op, for the numpy replay's passing case.
        clean_rows = None
        if tap != "tokens":
            recorded = rows_of(repro / "actual.h5", name, layer)
            cut = manifest["compared_positions"] if not name.startswith("weight.") else len(recorded)
            positions = [p for p in sorted(recorded) if p < cut]
            clean_tap = rows_of(clean, name, layer)
            clean_rows = np.stack([clean_tap[p] for p in positions])
            np.save(tmp_path / "clean.npy", clean_rows)
        # Nothing but the directory: the model and the traces are moved away.
        away = home.with_name(home.name + ".away")
        home.rename(away)
        try:
            failing = tapdiff("replay", repro)
            fixed = tapdiff("replay", repro, "--inject", "none")
            numpy_failing = python(repro / "repro.py")
            numpy_fixed = python(repro / "repro.py", "--actual", tmp_path / "clean.npy") if clean_rows is not None else None
        finally:
            away.rename(home)
        if failing.returncode != 1 or not failing.stdout.startswith(f"REPRODUCED {tap}"):
            problems.append(f"{fault}: replay exit {failing.returncode}: {failing.stdout}{failing.stderr}")
        if fixed.returncode != 0 or not fixed.stdout.startswith(f"PASS {tap}"):
            problems.append(f"{fault}: clean replay exit {fixed.returncode}: {fixed.stdout}{fixed.stderr}")
        if numpy_failing.returncode != 1 or "FAIL" not in numpy_failing.stdout:
            problems.append(f"{fault}: repro.py exit {numpy_failing.returncode}: {numpy_failing.stdout}"
                            f"{numpy_failing.stderr}")
        if numpy_fixed is not None and numpy_fixed.returncode != 0:
            problems.append(f"{fault}: repro.py --actual <clean> exit {numpy_fixed.returncode}: {numpy_fixed.stdout}"
                            f"{numpy_fixed.stderr}")
        shutil.rmtree(repro)
    assert ran == len(catalogue())
    assert not problems, "\n".join(problems)


def test_a_json_report_a_chosen_root_and_another_engines_trace(models, tmp_path):
    _, all_models = models
    model, ref = all_models["qwen2-f16"]  # q/k/v biases
    faulty = tmp_path / "two.h5"
    tapdiff("run", "--backend", "host", "-m", model, "--lockstep", ref, "--inject", "bias-dropped,lm-head-op-n",
            "-o", faulty, code=0)
    report = tmp_path / "report.json"
    report.write_text(tapdiff("diff", ref, faulty, "--format", "json", code=1).stdout)
    tapdiff("repro", report, "-o", tmp_path / "first", code=0)
    assert json.loads((tmp_path / "first" / "repro.json").read_text())["finding"]["tap"] == "blk.0.attn_q"
    # The lockstep diff's roots: q/k/v biases in each layer, then the head.
    roots = json.loads(report.read_text())["roots"]
    last = len(roots)
    assert roots[-1]["tap"] == "output"
    out = tapdiff("repro", ref, faulty, "--root", last, "-o", tmp_path / "head", code=0)
    assert "output @" in out.stdout and "stages 2..2" in out.stdout
    assert tapdiff("replay", tmp_path / "head").returncode == 1
    # A trace from another engine: no engine replay, the numpy one still reproduces.
    other = tmp_path / "other.h5"
    shutil.copy(faulty, other)
    with h5py.File(other, "r+") as f:
        f.attrs["producer"] = "external"
    out = tapdiff("repro", ref, other, "-o", tmp_path / "external", code=0)
    assert "not tapdiff's engine's" in out.stdout
    p = tapdiff("replay", tmp_path / "external", code=2)
    assert "repro.py" in p.stderr
    assert python(tmp_path / "external" / "repro.py").returncode == 1


def test_bad_input(models, tmp_path):
    _, all_models = models
    model, ref = all_models["llama-q8_0"]
    p = tapdiff("repro", ref, ref, "-o", tmp_path / "same", code=2)
    assert "nothing to reproduce" in p.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    p = tapdiff("repro", ref, ref, "-o", tmp_path / "full", code=2)
    assert "not empty" in p.stderr
    p = tapdiff("replay", tmp_path / "full", code=2)
    assert "repro.json" in p.stderr
    p = tapdiff("repro", tmp_path / "missing.json", "-o", tmp_path / "m", code=2)
    assert "missing.json" in p.stderr
    # A filtered expected trace cannot feed the replay: refused before anything is written.
    filtered = tmp_path / "filtered.h5"
    tapdiff("run", "-m", model, *PROMPT, "--taps", "blk.*.attn.probs", "-o", filtered, code=0)
    p = tapdiff("repro", filtered, ref, "-o", tmp_path / "f", code=2)
    assert "filtered.h5" in p.stderr and "--taps" in p.stderr and not (tmp_path / "f").exists()
    (tmp_path / "bad.json").write_text("{}")
    p = tapdiff("repro", tmp_path / "bad.json", "-o", tmp_path / "b", code=2)
    assert "bad.json" in p.stderr and "expected.path" in p.stderr


def test_an_attention_bug_seen_in_the_summary_alone_reproduces(models, tmp_path):
    # A long-context run keeps attn.probs.summary, not attn.probs: the finding, the engine replay
    # and the numpy replay all work on the summary.
    _, all_models = models
    model, _ = all_models["llama-q8_0"]
    ref, faulty, clean = tmp_path / "ref.h5", tmp_path / "faulty.h5", tmp_path / "clean.h5"
    summary_only = ["--taps", "!*.attn.probs"]
    tapdiff("run", "-m", model, *PROMPT, *summary_only, "-o", ref, code=0)
    tapdiff("run", "--backend", "host", "-m", model, *PROMPT, *summary_only, "--inject", "attn-scale", "-o", faulty,
            code=0)
    tapdiff("run", "--backend", "host", "-m", model, *PROMPT, *summary_only, "-o", clean, code=0)
    repro = tmp_path / "repro"
    tapdiff("repro", ref, faulty, "-o", repro, code=0)
    finding = json.loads((repro / "repro.json").read_text())["finding"]
    assert (finding["tap"], finding["class"]) == ("blk.0.attn.probs.summary", "attention-scale"), finding
    assert tapdiff("replay", repro, code=1).stdout.startswith("REPRODUCED blk.0.attn.probs.summary")
    assert tapdiff("replay", repro, "--inject", "none", code=0).stdout.startswith("PASS blk.0.attn.probs.summary")
    assert python(repro / "repro.py").returncode == 1
    recorded = rows_of(repro / "actual.h5", "attn.probs.summary", 0)
    clean_rows = rows_of(clean, "attn.probs.summary", 0)
    np.save(tmp_path / "clean.npy", np.stack([clean_rows[p] for p in sorted(recorded)]))
    numpy_fixed = python(repro / "repro.py", "--actual", tmp_path / "clean.npy")
    assert numpy_fixed.returncode == 0, numpy_fixed.stdout + numpy_fixed.stderr


def replays_clean_after_failing(tmp_path, model, prompt, fault, tap):
    """`fault` on `model`: its repro finds `tap` (blk.L.name), and repro.py fails on the recorded
    rows and passes on a clean engine's. Returns repro.py's run on the clean rows."""
    ref, faulty, clean = tmp_path / "ref.h5", tmp_path / "faulty.h5", tmp_path / "clean.h5"
    tapdiff("run", "-m", model, *prompt, "-o", ref, code=0)
    tapdiff("run", "--backend", "host", "-m", model, *prompt, "--inject", fault, "-o", faulty, code=0)
    tapdiff("run", "--backend", "host", "-m", model, *prompt, "-o", clean, code=0)
    repro = tmp_path / "repro"
    tapdiff("repro", ref, faulty, "-o", repro, code=0)
    manifest = json.loads((repro / "repro.json").read_text())
    assert manifest["finding"]["tap"] == tap, manifest["finding"]
    assert python(repro / "repro.py").returncode == 1
    _, layer, name = tap.split(".", 2)
    recorded = rows_of(repro / "actual.h5", name, int(layer))
    clean_rows = rows_of(clean, name, int(layer))
    np.save(tmp_path / "clean.npy",
            np.stack([clean_rows[p] for p in sorted(recorded) if p < manifest["compared_positions"]]))
    return python(repro / "repro.py", "--actual", tmp_path / "clean.npy")


@pytest.mark.parametrize("n_predict,factors", [("3", "short"), ("12", "long")])
def test_longrope_replays_with_the_factors_of_the_runs_context(tmp_path, n_predict, factors):
    # Phi-3.5's LongRoPE over an original context of 16: a run of 8 positions rotates with the short
    # factors, one of 17 with the long ones; repro.py picks the same set from the trace's n_ctx.
    model = tmp_path / "phi3.gguf"
    tapdiff("fixture", "--arch", "phi3", "--rope-scaling", "longrope", "-o", model, code=0)
    fixed = replays_clean_after_failing(tmp_path, model, ["--tokens", "1,20,40,60,80", "-n", n_predict],
                                        "rope-scaling-ignored", "blk.0.attn_q.rope")
    assert fixed.returncode == 0, f"{factors} factors: {fixed.stdout}{fixed.stderr}"


def test_gemma_27b_attention_replays_with_its_own_scale(tmp_path):
    # Gemma 3 27B (62 layers) scales scores by 1/sqrt(n_embd / n_head), not 1/sqrt(head_dim):
    # repro.py's attention takes the scale the trace's model declares, so a clean engine passes.
    model = tmp_path / "gemma3.gguf"
    tapdiff("fixture", "--arch", "gemma3", "--n-layer", "62", "--head-dim", "32", "-o", model, code=0)
    fixed = replays_clean_after_failing(tmp_path, model, PROMPT, "attn-scale", "blk.0.attn.probs")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
