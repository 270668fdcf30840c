"""One bug, one root, and never a wrong class: every catalogue fault injected into the engine
on both self-test fixture models, diffed against the reference in --all mode (every
divergence, grouped by independent root), must give exactly one root (a race: any number, one
per layer it shows in) whose class is the fault's catalogue class or "unexplained" (the class
withheld), never another."""
import json
import os
import subprocess

import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = ["--tokens", "1,20,40,60,80", "-n", "4"]
# A fault that only a chunked prefill exposes runs with one.
RUN_OPTIONS = {"kv-chunk-offset": ["--prefill-chunk", "2"]}
MODELS = {"llama-q8_0": ["--arch", "llama", "--type", "Q8_0"], "qwen2-f16": ["--arch", "qwen2", "--type", "F16"]}


def tapdiff(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)


def catalogue():
    lines = [line.split() for line in tapdiff("faults").stdout.splitlines() if line and not line[0].isspace()]
    return {fields[0]: fields[1] for fields in lines}


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    d = tmp_path_factory.mktemp("roots")
    out = {}
    for name, spec in MODELS.items():
        model, ref = d / f"{name}.gguf", d / f"{name}-ref.h5"
        assert tapdiff("fixture", *spec, "-o", model).returncode == 0
        assert tapdiff("run", "-m", model, *PROMPT, "--weights", "-o", ref).returncode == 0
        out[name] = (model, ref)
    return out


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_every_fault_is_one_root_of_its_class_or_unexplained(references, tmp_path, model_name):
    model, ref = references[model_name]
    faults = catalogue()
    assert len(faults) >= 46
    problems, ran = [], 0
    for fault, fault_class in faults.items():
        trace = tmp_path / f"{fault}.h5"
        if tapdiff("run", "--backend", "host", "-m", model, *PROMPT, "--inject", fault, "--weights",
                   *RUN_OPTIONS.get(fault, []), "-o", trace).returncode != 0:
            continue  # not applicable to this model (the run says why)
        ran += 1
        report = json.loads(tapdiff("diff", ref, trace, "--all", "--format", "json").stdout)
        roots = report["roots"]
        classes = [r["class"] for r in roots]
        # A race differs layer by layer: without --repeat its layers cannot be told to be one bug.
        one = len(roots) == 1 or fault_class == "nondeterministic"
        if not one or any(c not in (fault_class, "unexplained") for c in classes):
            problems.append(f"{fault} ({fault_class}): roots {[(r['tap'], r['class']) for r in roots]}")
    assert ran >= 35
    assert not problems, "\n".join(problems)
