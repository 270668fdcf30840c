"""Measures the honest noise the tolerance profiles must admit: for fixtures of both
architectures, the largest NMSE per tap class of (reference f32, engine f32/f16/bf16, and
llama.cpp with f32 and f16 KV caches, and a q8_0 cache with flash attention, where tapdiff was
built with it) against the reference's f64 run, the noise floor. Writes
bench/results/tolerance.md.

    build/venv/bin/python bench/calibrate_tolerances.py [--tapdiff build/app/tapdiff]
"""
import argparse
import collections
import json
import os
import pathlib
import platform
import subprocess
import tempfile

FIXTURES = {
    "llama 4L f32": ["--arch", "llama", "--n-layer", "4"],
    "llama 2L Q4_K 256-wide": ["--arch", "llama", "--n-embd", "256", "--n-ff", "512", "--type", "Q4_K"],
    "qwen2 4L Q8_0": ["--arch", "qwen2", "--n-layer", "4", "--type", "Q8_0"],
}
# A trained model when present: its attention is sharper than random weights', and a softmax
# over large logits amplifies rounding (the attention class's thresholds come from it).
STORIES = pathlib.Path(__file__).resolve().parents[2] / "shared" / "models" / "stories260K.gguf"
PROMPT = "1,70,200,33,5,90,12,140"
RUNS = {  # label -> tapdiff run options
    "reference f32": ["--backend", "reference"],
    "host f32": ["--backend", "host", "--precision", "f32"],
    "host f16": ["--backend", "host", "--precision", "f16"],
    "host bf16": ["--backend", "host", "--precision", "bf16"],
    "llama.cpp kv f32": ["--backend", "llama.cpp", "--threads", "2", "--llama-kv-type", "f32"],
    "llama.cpp kv f16": ["--backend", "llama.cpp", "--threads", "2"],
    "llama.cpp kv q8_0 flash": ["--backend", "llama.cpp", "--threads", "2", "--llama-kv-type", "q8_0",
                                "--llama-flash-attn"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tapdiff", default="build/app/tapdiff")
    ap.add_argument("--out", default="bench/results/tolerance.md")
    args = ap.parse_args()
    tapdiff = lambda *a: subprocess.run([args.tapdiff, *map(str, a)], capture_output=True, text=True, check=False)
    worst = collections.defaultdict(float)  # (run, class) -> max nmse
    columns = {}  # "run (the precision its traces declared)", in order
    classes = set()
    runs = dict(RUNS)
    probe = tapdiff("run", "--backend", "llama.cpp", "-m", "/nonexistent.gguf", "--tokens", "1")
    if "built without llama.cpp" in probe.stderr:
        runs = {k: v for k, v in runs.items() if not k.startswith("llama.cpp")}
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        models = {name: spec for name, spec in FIXTURES.items()}
        if STORIES.exists():
            models["stories260K"] = None
        for name, spec in models.items():
            model = STORIES if spec is None else d / "m.gguf"
            if spec is not None:
                tapdiff("fixture", "--seed", "5", *spec, "-o", model)
            floor = d / "f64.h5"
            tapdiff("run", "-m", model, "--precision", "f64", "--tokens", PROMPT, "-n", "24", "--logits", "all",
                    "-o", floor)
            for label, options in runs.items():
                trace = d / "t.h5"
                p = tapdiff("run", *options, "-m", model, "--tokens", PROMPT, "-n", "24", "--logits", "all",
                            "-o", trace)
                if "does not divide n_embd_head_k" in p.stderr:
                    continue  # llama.cpp's rule: a q8_0 cache row is whole blocks of 32
                if p.returncode != 0:
                    raise SystemExit(f"{label} on {name}: {p.stderr}")
                report = json.loads(tapdiff("diff", floor, trace, "--format", "json").stdout)
                column = f"{label} ({report['actual']['precision']})"
                columns.setdefault(column, None)
                for t in report["taps"]:
                    key = (column, t["class"])
                    classes.add(t["class"])
                    worst[key] = max(worst[key], t["min_passing_nmse"] or 0.0)
    labels = list(columns)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.machine())
    lines = [
        "# Tolerance calibration: honest noise against the f64 reference",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}  ",
        "Command: `build/venv/bin/python bench/calibrate_tolerances.py` (also run by `make bench`)  ",
        f"Models: {', '.join(models)}; prompt of 8 tokens + 24 generated; the largest NMSE of any row of",
        "each tap class, over all models. The built-in profiles' thresholds (diff/tolerance.cpp):",
        "f32 1e-8, f16 1e-4, bf16 3e-3, q8 3e-2 (projection, logits) and 3e-3 (others), jump factor 10;",
        "a row above its threshold may still be cleared by the own-error test (docs/tolerance.md). In",
        "parentheses: the precision the run's trace declared (llama.cpp's follows the weights and the cache: q8",
        "for quantized weights, whose activations it quantizes to 8 bits).",
        "",
        "| tap class | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for c in sorted(classes):
        lines.append(f"| {c} | " + " | ".join(f"{worst[(r, c)]:.2e}" for r in labels) + " |")
    lines.append("| **all** | " + " | ".join(f"**{max(worst[(r, c)] for c in classes):.2e}**" for r in labels) + " |")
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
