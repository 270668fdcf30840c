"""What tracing llama.cpp costs: `tapdiff run --backend llama.cpp` on SmolLM2-135M Q4_1 (and
stories260K when present) with no trace, with the logits alone, and with every tap, the median
of several runs each, same threads, one after the other. Writes bench/results/llama_trace.md.

    build/venv/bin/python bench/bench_llama_trace.py [--tapdiff build/app/tapdiff] [--repeats 5]
"""
import argparse
import os
import pathlib
import platform
import statistics
import subprocess
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODELS = [ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf", ROOT.parent / "shared" / "models" / "stories260K.gguf"]
PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play"
N_PREDICT = 48
MODES = {"no trace": None, "logits only": "output", "every tap": ""}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tapdiff", default=str(ROOT / "build" / "app" / "tapdiff"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "llama_trace.md"))
    args = ap.parse_args()
    probe = subprocess.run([args.tapdiff, "run", "--backend", "llama.cpp", "-m", "/nonexistent.gguf", "--tokens", "1"],
                           capture_output=True, text=True)
    if "built without llama.cpp" in probe.stderr:
        raise SystemExit(probe.stderr.strip())
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for model in (m for m in MODELS if m.exists()):
            times, sizes = {}, {}
            for mode, taps in MODES.items():
                trace = pathlib.Path(d) / "t.h5"
                cmd = [args.tapdiff, "run", "--backend", "llama.cpp", "--threads", str(args.threads), "-m", str(model),
                       "--prompt", PROMPT, "-n", str(N_PREDICT)]
                if taps is not None:
                    cmd += ["-o", str(trace)] + (["--taps", taps] if taps else [])
                samples = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    subprocess.run(cmd, check=True, capture_output=True)
                    samples.append(time.perf_counter() - start)
                times[mode] = statistics.median(samples)
                sizes[mode] = trace.stat().st_size if taps is not None else 0
            base = times["no trace"]
            for mode in MODES:
                rows.append(f"| {model.name} | {mode} | {times[mode]:.3f} | {times[mode] / base:.2f}x | "
                            f"{sizes[mode] / 1e6:.1f} |")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
               platform.machine())
    lines = [
        "# Cost of tracing llama.cpp",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores; llama.cpp with {args.threads} threads  ",
        "Command: `build/venv/bin/python bench/bench_llama_trace.py` (also run by `make bench`)  ",
        f"`tapdiff run --backend llama.cpp --prompt \"{PROMPT}\"` + {N_PREDICT} generated tokens; "
        f"wall time of the whole command (model load included), median of {args.repeats} runs.",
        "",
        "| model | trace | seconds | vs no trace | trace MB |",
        "|---|---|---|---|---|",
        *rows,
    ]
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
