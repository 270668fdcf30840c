"""Measures the honest noise the tolerance profiles must admit: for fixtures of both
architectures, the largest NMSE per tap class of (reference f32, engine f32/f16/bf16)
against the reference's f64 run, the noise floor. Writes bench/results/tolerance.md.

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
PROMPT = "1,70,200,33,5,90,12,140"
RUNS = [("reference", "f32"), ("host", "f32"), ("host", "f16"), ("host", "bf16")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tapdiff", default="build/app/tapdiff")
    ap.add_argument("--out", default="bench/results/tolerance.md")
    args = ap.parse_args()
    tapdiff = lambda *a: subprocess.run([args.tapdiff, *map(str, a)], capture_output=True, text=True, check=False)
    worst = collections.defaultdict(float)  # (run, class) -> max nmse
    classes = set()
    with tempfile.TemporaryDirectory() as d:
        d = pathlib.Path(d)
        for name, spec in FIXTURES.items():
            model = d / "m.gguf"
            tapdiff("fixture", "--seed", "5", *spec, "-o", model)
            floor = d / "f64.h5"
            tapdiff("run", "-m", model, "--precision", "f64", "--tokens", PROMPT, "-n", "24", "-o", floor)
            for backend, precision in RUNS:
                trace = d / "t.h5"
                tapdiff("run", "--backend", backend, "--precision", precision, "-m", model, "--tokens", PROMPT,
                        "-n", "24", "-o", trace)
                report = json.loads(tapdiff("diff", floor, trace, "--format", "json", "--profile", precision).stdout)
                for t in report["taps"]:
                    key = (f"{backend} {precision}", t["class"])
                    classes.add(t["class"])
                    worst[key] = max(worst[key], t["min_passing_nmse"] or 0.0)
    runs = [f"{b} {p}" for b, p in RUNS]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.machine())
    lines = [
        "# Tolerance calibration: honest noise against the f64 reference",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}  ",
        "Command: `build/venv/bin/python bench/calibrate_tolerances.py` (also run by `make bench`)  ",
        f"Fixtures: {', '.join(FIXTURES)}; prompt of 8 tokens + 24 generated; the largest NMSE of any row of",
        "each tap class, over all fixtures. The built-in profiles' thresholds (diff/tolerance.cpp) sit",
        "well above these: f32 1e-8, f16 1e-4, bf16 3e-3 (all classes), jump factor 10.",
        "",
        "| tap class | " + " | ".join(runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for c in sorted(classes):
        lines.append(f"| {c} | " + " | ".join(f"{worst[(r, c)]:.2e}" for r in runs) + " |")
    lines.append("| **all** | " + " | ".join(f"**{max(worst[(r, c)] for c in classes):.2e}**" for r in runs) + " |")
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
