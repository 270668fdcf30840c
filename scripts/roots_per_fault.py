"""Roots per bug: every catalogue fault on the two self-test fixture models, diffed against the
reference in --all mode and in lockstep; one Markdown row per (model, fault) with the first
root's tap, position, class and evidence and the number of roots each mode reports (one bug
should be one root). Usage: build/venv/bin/python scripts/roots_per_fault.py [build/app/tapdiff] [f32|f16]
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TAPDIFF = sys.argv[1] if len(sys.argv) > 1 else "build/app/tapdiff"
PRECISION = sys.argv[2] if len(sys.argv) > 2 else "f32"
PROMPT = ["--tokens", "1,20,40,60,80", "-n", "4"]
MODELS = {"llama-q8_0": ["--arch", "llama", "--type", "Q8_0"], "qwen2-f16": ["--arch", "qwen2", "--type", "F16"]}


def tapdiff(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True)


def roots(ref, trace, *flags):
    p = tapdiff("diff", ref, trace, "--format", "json", *flags)
    return json.loads(p.stdout)["roots"] if p.stdout.startswith("{") else None


def main():
    faults = [line.split()[0] for line in tapdiff("faults").stdout.splitlines() if line and not line[0].isspace()]
    print("| model | fault | first root | class (evidence) | roots, --all | roots, lockstep |")
    print("|---|---|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model, spec in MODELS.items():
            gguf, ref = Path(tmp, model + ".gguf"), Path(tmp, model + "-ref.h5")
            tapdiff("fixture", *spec, "-o", gguf)
            tapdiff("run", "-m", gguf, *PROMPT, "--weights", "-o", ref)
            for fault in faults:
                trace, lockstep = Path(tmp, "engine.h5"), Path(tmp, "lockstep.h5")
                if tapdiff("run", "--backend", "host", "-m", gguf, *PROMPT, "--precision", PRECISION, "--inject",
                           fault, "--weights", "-o", trace).returncode != 0:
                    continue  # the fault does not apply to this model
                tapdiff("run", "--backend", "host", "-m", gguf, "--precision", PRECISION, "--inject", fault,
                        "--lockstep", ref, "-o", lockstep)
                every, locked = roots(ref, trace, "--all"), roots(ref, lockstep, "--lockstep")
                first = every[0] if every else None
                where = f"`{first['tap']}` @ {first['position']}" if first else "-"
                cls = f"{first['class']} ({first['evidence']})" if first else "-"
                print(f"| {model} | {fault} | {where} | {cls} | {len(every or [])} | "
                      f"{len(locked) if locked is not None else '-'} |")


if __name__ == "__main__":
    main()
