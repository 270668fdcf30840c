"""Every supported architecture proven against llama.cpp: for each architecture and tensor type a
fixture model is traced by tapdiff's reference, its host engine and llama.cpp
(`--backend llama.cpp`, f16 KV cache), and diffed: reference vs llama.cpp and engine vs reference,
every tap, with the greedy continuations compared. Writes bench/results/architectures.md (the
table docs/model.md carries).

    build/venv/bin/python bench/architectures.py [--tapdiff build/app/tapdiff]
"""
import argparse
import json
import pathlib
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROMPT = "1,70,200,33,5,90,12,140"
N_PREDICT = 8
K_SHAPE = ["--n-embd", "256", "--n-ff", "512", "--n-head", "8", "--n-head-kv", "2"]
ARCHS = {  # name -> fixture options shared by its tensor types
    "llama (Llama 2, Mistral)": ["--arch", "llama"],
    "llama, explicit head_dim (Mistral Nemo)": ["--arch", "llama", "--head-dim", "32"],
    "llama3 (Llama 3.1 rope_freqs)": ["--arch", "llama3"],
    "qwen2": ["--arch", "qwen2"],
    "qwen3": ["--arch", "qwen3", "--head-dim", "32"],
    "gemma2": ["--arch", "gemma2"],
    "gemma3 (6 layers: 5 sliding, 1 global)": ["--arch", "gemma3", "--n-layer", "6"],
    "phi3 (fused qkv and gate/up)": ["--arch", "phi3"],
    "qwen3moe (8 experts, 2 a token)": ["--arch", "qwen3moe", "--head-dim", "32"],
    "llama with experts (Mixtral: 4 experts, 2 a token)": ["--arch", "llama", "--n-expert", "4", "--n-expert-used", "2"],
    "smollm3 (4 layers, the last without RoPE)": ["--arch", "smollm3", "--n-layer", "4"],
    "mistral3 (YaRN x16, attention temperature from position 4)": ["--arch", "mistral3", "--n-ctx", "64"],
    "granite (embedding, residual, attention and logit multipliers; tied head)": ["--arch", "granite", "--tied"],
    "granitemoe (Granite's multipliers, 8 experts, 2 a token)": ["--arch", "granitemoe"],
    "gemma3, linear RoPE scaling x8 on the global layer (Gemma 3 4B+)": ["--arch", "gemma3", "--n-layer", "6",
                                                                         "--rope-scaling", "linear"],
    "qwen3, YaRN RoPE scaling x4 (Qwen3 128k)": ["--arch", "qwen3", "--head-dim", "32", "--rope-scaling", "yarn"],
    # A run within the original context of 256 (8192 / 32): the short factors, in llama.cpp too (it
    # pads its context to 256 before it chooses).
    "phi3, LongRoPE (Phi-3.5)": ["--arch", "phi3", "--n-ctx", "8192", "--rope-scaling", "longrope"],
    "phi3, LongRoPE on 12 dimensions of each head, tied head (Phi-4-mini)": [
        "--arch", "phi3", "--n-ctx", "8192", "--rope-scaling", "longrope", "--rope-dim", "12", "--tied"],
}
HF_TYPES = ("F32", "Q4_K")  # the rows transformers runs too: float and a K-quant (its own dequantizer)
TYPES = {  # every tensor type tapdiff reads
    "F32": [],
    "F16": ["--type", "F16"],
    "BF16": ["--type", "BF16"],
    "Q8_0": ["--type", "Q8_0"],
    "Q4_0": ["--type", "Q4_0"],
    "Q4_1": ["--type", "Q4_1"],
    "Q5_0": ["--type", "Q5_0"],
    "Q5_1": ["--type", "Q5_1"],
    "Q4_K": [*K_SHAPE, "--type", "Q4_K"],
    "Q5_K": [*K_SHAPE, "--type", "Q5_K"],
    "Q6_K": [*K_SHAPE, "--type", "Q6_K"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tapdiff", default=str(ROOT / "build" / "app" / "tapdiff"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "architectures.md"))
    args = ap.parse_args()

    def tapdiff(*a):
        return subprocess.run([args.tapdiff, *map(str, a)], capture_output=True, text=True)

    def diff(a, b):
        p = tapdiff("diff", a, b, "--format", "json")
        return json.loads(p.stdout)

    def vs_transformers(model, reference):
        trace = pathlib.Path(str(model) + "-transformers.h5")
        p = tapdiff("run", "--backend", "transformers", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT,
                    "--logits", "all", "-o", trace)
        if p.returncode != 0:
            said = [line for line in p.stderr.splitlines() if line.startswith("tapdiff_transformers: error: ")]
            return "refused: " + (said[0].split("error: ", 1)[1].replace(f"{model}: ", "") if said else p.stderr.strip())
        r = diff(reference, trace)
        text = f"{r['verdict'].upper()} ({r['profile']}, {len(r['taps'])} taps)"
        if r["verdict"] != "pass":
            first, d = r["first_divergence"], r["diagnosis"]
            text += f" at {first['tap']} @ {first['position']}: {d['class']} ({d['evidence']}): {d.get('variant', '')}"
        return text

    def tokens(trace):
        return json.loads(tapdiff("inspect", "--json", trace).stdout)["tokens"]

    rows, hf_rows = [], []
    with tempfile.TemporaryDirectory() as d:
        for arch, arch_options in ARCHS.items():
            for type_name, type_options in TYPES.items():
                options = arch_options + type_options
                if "--head-dim" in options and "--n-embd" in options:  # k-quant rows: q_dim a multiple of 256
                    options[options.index("--head-dim") + 1] = "64"
                base = pathlib.Path(d) / f"{len(rows)}"
                model = base.with_suffix(".gguf")
                if tapdiff("fixture", "--seed", "5", *options, "-o", model).returncode != 0:
                    raise SystemExit(f"fixture {arch} {type_name} failed")
                traces = {}
                for backend in ("reference", "host", "llama.cpp"):
                    traces[backend] = base.with_name(f"{base.name}-{backend}.h5")
                    p = tapdiff("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", N_PREDICT,
                                "--logits", "all", "-o", traces[backend],
                                *(["--threads", "2"] if backend == "llama.cpp" else []))
                    if p.returncode != 0:
                        raise SystemExit(f"{backend} on {arch} {type_name}: {p.stderr.strip()}")
                vs_llama = diff(traces["reference"], traces["llama.cpp"])
                vs_engine = diff(traces["reference"], traces["host"])
                same_ids = tokens(traces["reference"]) == tokens(traces["llama.cpp"])
                near_tie = [f["detail"].split(":")[0] for f in vs_llama["findings"] if f["kind"] == "near-tie"]
                ids = "equal" if same_ids else f"differ: near-tie ({near_tie[0]})" if near_tie else "DIFFER"
                routing_ties = [f for f in vs_llama["findings"] if f["kind"] == "routing-tie"]
                if routing_ties:
                    ids += f"; routing ties in {len(routing_ties)} layer{'s' if len(routing_ties) > 1 else ''}"
                rows.append(f"| {arch} | {type_name} | {vs_llama['verdict'].upper()} ({vs_llama['profile']}, "
                            f"{len(vs_llama['taps'])} taps) | {vs_engine['verdict'].upper()} ({vs_engine['profile']}, "
                            f"{len(vs_engine['taps'])} taps) | {ids} |")
                print(rows[-1], flush=True)
                if type_name in HF_TYPES:
                    hf_rows.append(f"| {arch} | {type_name} | {vs_transformers(model, traces['reference'])} |")
                    print(hf_rows[-1], flush=True)
    lines = [
        "# Every architecture against llama.cpp",
        "",
        f"Fixture models (`tapdiff fixture --seed 5`), prompt `{PROMPT}`, {N_PREDICT} tokens generated, logits at",
        "every position. llama.cpp: llama-cpp-python 0.3.36 (CPU, 2 threads, f16 KV cache). Reference vs",
        "llama.cpp and host engine vs reference: `tapdiff diff` verdict, its tolerance profile and the taps",
        "compared (llama.cpp has no node for the KV cache read-backs: 2 per layer fewer). Greedy ids: the",
        "reference's tokens against llama.cpp's; where they differ, `diff` found the flip at a near-tie of the",
        "logits within the precision's noise (a note, not a divergence: `docs/tolerance.md`). A mixture of",
        "experts: experts chosen apart at a near tie of the router are a `routing-tie` note, counted in the",
        "last column (`docs/diagnosis.md`).",
        "",
        "Rerun: `build/venv/bin/python bench/architectures.py` (part of `make bench`).",
        "",
        "| architecture | weights | reference vs llama.cpp | engine vs reference | greedy ids vs llama.cpp |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "## Against transformers",
        "",
        "The same fixtures in F32 and Q4_K, run by Hugging Face transformers (`--backend transformers`, float32,",
        "eager attention and experts; `docs/cross-engine.md`), against the reference. transformers ignores Llama",
        "3.1's `rope_freqs.weight` (its GGUF loader's limit, named by the diff), and loads a llama GGUF with",
        "experts as a dense llama (refused: it would run the missing FFN weights initialized at random).",
        "",
        "| architecture | weights | reference vs transformers |",
        "|---|---|---|",
        *hf_rows,
        "",
    ]
    pathlib.Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
