"""Third-party engines check tapdiff: tapdiff's reference and host engine against llama.cpp
(`--backend llama.cpp`) and Hugging Face transformers (`--backend transformers`) on SmolLM2-135M
Q4_1, every tap, and the reference against the host engine for scale. Writes
bench/results/cross_engine.md.

    build/venv/bin/python bench/cross_engine.py [--tapdiff build/app/tapdiff]
"""
import argparse
import json
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The capital of France is"
N_PREDICT = 16
RUNS = {  # name -> tapdiff run options
    "reference": ["--backend", "reference"],
    "host engine": ["--backend", "host"],
    "llama.cpp (f16 KV)": ["--backend", "llama.cpp", "--threads", "2"],
    "llama.cpp (f32 KV)": ["--backend", "llama.cpp", "--threads", "2", "--llama-kv-type", "f32"],
    "transformers": ["--backend", "transformers"],
}
PAIRS = [("reference", "host engine"), ("reference", "llama.cpp (f16 KV)"), ("reference", "llama.cpp (f32 KV)"),
         ("host engine", "llama.cpp (f32 KV)"), ("reference", "transformers"), ("host engine", "transformers"),
         ("llama.cpp (f32 KV)", "transformers")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tapdiff", default=str(ROOT / "build" / "app" / "tapdiff"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cross_engine.md"))
    args = ap.parse_args()
    if not MODEL.exists():
        raise SystemExit(f"{MODEL} is absent: make models")
    tapdiff = lambda *a: subprocess.run([args.tapdiff, *map(str, a)], capture_output=True, text=True)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        traces = {}
        for name, options in RUNS.items():
            traces[name] = pathlib.Path(d) / f"{len(traces)}.h5"
            p = tapdiff("run", *options, "-m", MODEL, "--prompt", PROMPT, "-n", N_PREDICT, "--logits", "all",
                        "-o", traces[name])
            if p.returncode != 0:
                print(f"{name}: skipped ({p.stderr.strip().splitlines()[-1]})")
                traces.pop(name)
        for a, b in PAIRS:
            if a not in traces or b not in traces:
                continue
            r = json.loads(tapdiff("diff", traces[a], traces[b], "--format", "json").stdout)
            worst = max(r["taps"], key=lambda t: t["worst_nmse"] or 0)
            notes = sorted({f["kind"] for f in r["findings"] if f["kind"] not in ("metadata",)})
            logits = r["logits"] or {}
            rows.append(f"| {a} | {b} | {r['verdict'].upper()} | {r['profile']} | {len(r['taps'])} | "
                        f"{r['compared_positions']} | {worst['worst_nmse']:.2g} ({worst['tap']}) | "
                        f"{logits.get('kl_mean', 0):.2g} | {', '.join(notes) or '-'} |")
    lines = [
        "# Cross-engine check: tapdiff's programs against llama.cpp and transformers",
        "",
        f"Model: {MODEL.name}; prompt \"{PROMPT}\" + {N_PREDICT} generated tokens, greedy, `--logits all`  ",
        "Command: `build/venv/bin/python bench/cross_engine.py` (needs `make models`)",
        "",
        "| expected | actual | verdict | profile | taps compared | positions | largest row NMSE | KL mean | notes |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Positions: the common token prefix (after a near-tie flip, `near-tie` in notes, the rest is not compared).",
        "llama.cpp records 16 taps per layer (kv.k and kv.v are not available from it), transformers all 18.",
    ]
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
