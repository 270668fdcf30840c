"""A mixture of experts at a real size: an OLMoE-1B-7B-shaped fixture (a llama GGUF with experts,
Mixtral's layout: 16 layers, n_embd 2048, 64 experts of width 1024, 8 a token; Q4_K, the experts'
down matrices Q6_K; 6.9 B parameters, 4.1 GiB) run by the host engine and by llama.cpp side by
side, then traced by the reference and the engine and diffed, with each command's time and peak
memory. Writes bench/results/experts.md.

    build/venv/bin/python bench/experts.py [--tapdiff build/app/tapdiff] [--reps 3]

Timing and memory as bench/large_models.py measures them (its docstring): tapdiff's figures are
differences of whole `tapdiff run` commands, llama.cpp's one eval of the prompt and one-token
evals, the rounds interleaved, medians over the rounds.
"""
import argparse
import pathlib
import statistics
import tempfile

import large_models as lm

OLMOE = ["--arch", "llama", "--n-layer", "16", "--n-embd", "2048", "--n-head", "16", "--n-head-kv", "16",
         "--n-ff", "1024", "--n-expert", "64", "--n-expert-used", "8", "--n-vocab", "50304", "--n-ctx", "4096",
         "--type", "Q4_K", "--tensor-type", "blk.*.ffn_down_exps.weight=Q6_K", "--seed", "7"]
PP, TG = 32, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tapdiff", default=str(lm.ROOT / "build" / "app" / "tapdiff"))
    ap.add_argument("--out", default=str(lm.ROOT / "bench" / "results" / "experts.md"))
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    lm.WORK.mkdir(parents=True, exist_ok=True)
    td = lm.Tapdiff(args.tapdiff)
    model = lm.WORK / "olmoe-1b-7b-shaped-q4_k.gguf"
    steps = []
    if not model.exists():
        steps.append(("`tapdiff fixture` (OLMoE-1B-7B shape)", lm.measure([args.tapdiff, "fixture", *OLMOE, "-o", model])))

    lm.read_back_from_disk(model)
    theirs, mine = [], {p: [] for p in ("f32", "q8")}
    for r in range(args.reps):
        if r % 2 == 0:
            theirs.append(lm.llama_speeds(model, PP, TG))
        for precision, rounds in mine.items():
            rounds.append(td.speeds("host", model, PP, TG, precision))
        if r % 2 == 1:
            theirs.append(lm.llama_speeds(model, PP, TG))
    speed_rows = []
    for precision, rounds in mine.items():
        for what, n in (("pp", PP), ("tg", TG)):
            ratios = [m[what] / t[what] for m, t in zip(rounds, theirs)]
            speed_rows.append(f"| engine {precision} {what}{n} | {statistics.median(m[what] for m in rounds):.1f} | "
                              f"{statistics.median(t[what] for t in theirs):.1f} | {statistics.median(ratios):.2f}x |")
        print(speed_rows[-2:], flush=True)

    with tempfile.TemporaryDirectory(dir=lm.WORK) as d:
        ref, eng, llama = (pathlib.Path(d) / n for n in ("ref.h5", "engine.h5", "llama.h5"))
        prompt = ["--tokens", lm.csv(lm.tokens(8)), "-n", "8"]
        for what, backend, trace in (("reference", "reference", ref), ("host", "host", eng),
                                     ("llama.cpp", "llama.cpp", llama)):
            steps.append((f"`tapdiff run --backend {what}` (8 + 8 tokens, every tap)",
                          lm.measure([args.tapdiff, "run", "--backend", backend, "-m", model, *prompt, "-o", trace,
                                      *(["--threads", "2"] if backend == "llama.cpp" else [])], td.env)))
        steps.append(("`tapdiff diff ref.h5 engine.h5`", lm.measure([args.tapdiff, "diff", ref, eng], td.env)))
        verdicts = [steps[-1][1][2].strip().splitlines()[0]]
        steps.append(("`tapdiff diff ref.h5 llama.h5`", lm.measure([args.tapdiff, "diff", ref, llama], td.env)))
        verdicts.append(steps[-1][1][2].strip().splitlines()[0])
        trace_mib = ref.stat().st_size / 2**20
    memory_rows = [f"| {what} | {s:.1f} | {rss / 1024:.2f} |" for what, (s, rss, _) in steps]

    lines = [
        "# A mixture of experts at a real size",
        "",
        f"Command: `build/venv/bin/python bench/experts.py` (`make bench` runs it). Machine: {lm.cpu_name()}, "
        f"{lm.THREADS} threads for every program (OMP_WAIT_POLICY=active), llama-cpp-python "
        f"{lm.importlib.metadata.version('llama_cpp_python')}. Method: bench/large_models.py's docstring.",
        "",
        f"Model: `tapdiff fixture {' '.join(OLMOE)}` (OLMoE-1B-7B's shape in Mixtral's llama layout), "
        f"{lm.types_of(model)}, {model.stat().st_size / 2**30:.2f} GiB; {lm.parameters(model) / 1e9:.2f} B parameters, "
        f"of which a token reads its 8 of 64 experts.",
        "",
        f"## Throughput, side by side (tokens/s, medians of {args.reps} interleaved rounds; the ratio: the median "
        "of the rounds' ratios)",
        "",
        "At f32 the engine's expert GEMMs decode each block to float32, at q8 they multiply 8-bit activations as "
        "llama.cpp does (docs/engine.md). A decode step runs one matrix-vector product per used expert and "
        "matrix; a prompt, one GEMM per expert over the rows routed to it.",
        "",
        "| measure | tapdiff | llama.cpp | tapdiff / llama.cpp |",
        "|---|---|---|---|",
        *speed_rows,
        "",
        "## End to end: time and peak memory of each command",
        "",
        "| command | s | peak RSS GiB |",
        "|---|---|---|",
        *memory_rows,
        "",
        f"The diffs' verdicts: `{verdicts[0]}` (engine); `{verdicts[1]}` (llama.cpp). Trace size: {trace_mib:.0f} MiB.",
        "",
    ]
    pathlib.Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
