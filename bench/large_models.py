"""Real model sizes: the host engine and the reference against llama.cpp (the pinned PyPI
package, in this process, same threads, same run) on SmolLM2-135M in F32, Q8_0, Q4_1 and Q4_K_M and on a
Llama-2-7B-shaped Q4_K_M fixture; the peak memory of every command of the 7B end-to-end check;
a 2048-token prompt traced and diffed, with every tap and without attn.probs. Writes
bench/results/large_models.md.

    build/venv/bin/python bench/large_models.py [--tapdiff build/app/tapdiff] [--skip-7b]

Timing. llama.cpp: pp = one llama_eval of the prompt, tg = one-token evals after a one-token
prompt (llama-bench's definitions). tapdiff has no in-process API for Python, so its figures
are differences of whole `tapdiff run` commands that differ only in the work measured:
tg = 64 / (T(1 token, -n 65) - T(1 token, -n 1)) and pp = 511 / (T(512 tokens, -n 1) -
T(1 token, -n 1)) (llama-bench's default prompt: with 128 tokens the startup's noise was the size
of the work); loading and startup cancel (a run that writes no trace does not hash its model), and the two runs of a difference are
back to back. The measurements are interleaved: each of --reps rounds times llama.cpp once
(a child process) and each tapdiff figure once, llama.cpp first in even rounds and last in odd
ones, so that a shared machine whose speed drifts slows both sides of a round alike. Each
side's figure is its median over the rounds; the ratio is the median of the rounds' ratios.
Before a model's rounds its file leaves the page cache and is read back (read_back_from_disk),
so that every round finds the same pages and none reads the disk.
Peak memory: ru_maxrss of each command (os.wait4), mapped model pages included. llama.cpp and
the reads of a model back from disk run in child processes of this script (`--llama-speeds`,
`--quantize`, `--read-back`), so this process stays small:
a child's ru_maxrss starts from its parent's resident size at fork.
"""
import argparse
import importlib.metadata
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
WORK = ROOT / "build" / "bench"
THREADS = 2
# Llama-2-7B's shape; llama.cpp's Q4_K_M rule (use_more_bits) puts attn_v and ffn_down of
# these layers in Q6_K, the output head in Q6_K, the rest in Q4_K.
LLAMA2_7B = ["--n-layer", "32", "--n-embd", "4096", "--n-head", "32", "--n-head-kv", "32",
             "--n-ff", "11008", "--n-vocab", "32000", "--n-ctx", "4096", "--type", "Q4_K",
             "--tensor-type", "output.weight=Q6_K"]
for _l in range(32):
    if _l < 4 or _l >= 28 or (_l - 4) % 3 == 2:
        LLAMA2_7B += ["--tensor-type", f"blk.{_l}.attn_v.weight=Q6_K",
                      "--tensor-type", f"blk.{_l}.ffn_down.weight=Q6_K"]


def tokens(n):
    return [1 + (7919 * i) % 31000 for i in range(n)]


def csv(ids):
    return ",".join(map(str, ids))


def measure(cmd, env=None):
    """(seconds, peak RSS in MiB, completed process output) of one command."""
    t0 = time.perf_counter()
    p = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    out = p.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 1):
        raise SystemExit(f"{' '.join(map(str, cmd))}: exit {code}\n{out[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, out


class Tapdiff:
    def __init__(self, exe):
        self.exe = exe
        self.env = dict(os.environ, OMP_NUM_THREADS=str(THREADS), OMP_WAIT_POLICY="active")

    def run_time(self, backend, model, n_prompt, n_predict, precision):
        cmd = [self.exe, "run", "--backend", backend, "-m", model, "--tokens", csv(tokens(n_prompt)),
               "-n", n_predict, "--precision", precision]
        return measure(cmd, self.env)[0]

    def work_time(self, backend, model, n_prompt, n_predict, precision):
        """T(n_prompt, n_predict) - T(1, 1), the two runs back to back."""
        return (self.run_time(backend, model, n_prompt, n_predict, precision) -
                self.run_time(backend, model, 1, 1, precision))

    def speeds(self, backend, model, pp, tg, precision="f32"):
        """Tokens/s; infinite where the timing noise of a round exceeded the work measured (a
        median over the rounds stays finite unless that happened in half of them)."""
        def speed(tokens, seconds):
            return tokens / seconds if seconds > 0 else float("inf")
        out = {"tg": speed(tg, self.work_time(backend, model, 1, tg + 1, precision))}
        if pp:
            out["pp"] = speed(pp - 1, self.work_time(backend, model, pp, 1, precision))
        return out


def read_back_here(path):
    """Drops path's pages from the page cache (written back first) and reads them back through a
    mapping that asks for huge pages, as tapdiff's own does (model/mapped_file.cpp): every round
    of a model then finds the same pages, none reads the disk, and which pages a file's cache
    holds is no longer whatever wrote or last read it (a decode step reads all of them: on the 7B
    fixture the engine's q8 decode ran 7.7 to 7.9 tokens/s with 0.8 of its 3.8 GiB mapped in
    2 MiB pages, `FilePmdMapped` in /proc/PID/smaps, and 8.5 to 9.0 read back)."""
    import mmap
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
            if hasattr(mmap, "MADV_HUGEPAGE"):
                m.madvise(mmap.MADV_HUGEPAGE)
            sum(m[i] for i in range(0, len(m), mmap.PAGESIZE))
    finally:
        os.close(fd)


def llama_speeds_here(model, pp, tg):
    from llama_cpp import Llama
    m = Llama(model_path=str(model), n_ctx=1024, n_batch=512, n_threads=THREADS, n_threads_batch=THREADS,
              verbose=False)
    t0 = time.perf_counter()
    m.eval(tokens(pp))
    speeds = {"pp": pp / (time.perf_counter() - t0)}
    m.reset()
    m.eval(tokens(1))
    t0 = time.perf_counter()
    for t in tokens(tg + 1)[1:]:
        m.eval([t])
    speeds["tg"] = tg / (time.perf_counter() - t0)
    return speeds


def quantize_here(src, dst, ftype):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.allow_requantize, p.nthread = getattr(llama_cpp, ftype), True, THREADS
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # the quantizer logs every tensor
    return llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), p)


def child(*args):
    p = subprocess.run([sys.executable, __file__, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, args))}: {p.stderr[-2000:]}")
    return p.stdout


def llama_speeds(model, pp, tg):
    return json.loads(child("--llama-speeds", model, pp, tg))


def read_back_from_disk(path):
    """read_back_here in a child process: mapped here, the file would raise this process's
    resident high-water mark, which every command it starts after inherits (see Peak memory)."""
    child("--read-back", path)


def quantize(src, dst, ftype):
    """A copy of src in another type, by llama.cpp's own quantizer."""
    if not dst.exists():
        child("--quantize", src, dst, ftype)
    return dst


def types_of(model):
    import gguf
    counts = {}
    for t in gguf.GGUFReader(str(model)).tensors:
        if len(t.shape) >= 2:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + int(t.n_elements)
    total = sum(counts.values())
    return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def cpu_name():
    """The CPU's model name as /proc/cpuinfo gives it (platform.processor() is empty on Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def parameters(model):
    import gguf
    return sum(int(t.n_elements) for t in gguf.GGUFReader(str(model)).tensors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tapdiff", default=str(ROOT / "build" / "app" / "tapdiff"))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "large_models.md"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-7b", action="store_true", help="leave out the 7B fixture (about 15 minutes)")
    ap.add_argument("--llama-speeds", nargs=3, metavar=("MODEL", "PP", "TG"), help=argparse.SUPPRESS)
    ap.add_argument("--quantize", nargs=3, metavar=("SRC", "DST", "FTYPE"), help=argparse.SUPPRESS)
    ap.add_argument("--read-back", metavar="MODEL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.llama_speeds:
        model, pp, tg = args.llama_speeds
        print(json.dumps(llama_speeds_here(model, int(pp), int(tg))))
        return
    if args.quantize:
        sys.exit(quantize_here(*args.quantize))
    if args.read_back:
        read_back_here(args.read_back)
        return
    if not SMOLLM2.exists():
        raise SystemExit(f"{SMOLLM2} is absent: make models")
    WORK.mkdir(parents=True, exist_ok=True)
    td = Tapdiff(args.tapdiff)
    f32 = quantize(SMOLLM2, WORK / "SmolLM2-135M-Instruct.llama-F32.gguf", "LLAMA_FTYPE_ALL_F32")
    q8 = quantize(f32, WORK / "SmolLM2-135M-Instruct.llama-Q8_0.gguf", "LLAMA_FTYPE_MOSTLY_Q8_0")
    # 576-wide rows are no multiple of 256: llama.cpp's Q4_K_M rule keeps those matrices in a
    # legacy type, and the 1536-wide ffn_down in Q4_K / Q6_K.
    q4k = quantize(f32, WORK / "SmolLM2-135M-Instruct.llama-Q4_K_M.gguf", "LLAMA_FTYPE_MOSTLY_Q4_K_M")
    models = [("SmolLM2-135M F32", f32), ("SmolLM2-135M Q8_0", q8), ("SmolLM2-135M Q4_1", SMOLLM2),
              ("SmolLM2-135M Q4_K_M", q4k)]
    big = WORK / "llama2-7b-q4_k_m.gguf"
    gen = None
    if not args.skip_7b:
        if not big.exists():
            gen = measure([args.tapdiff, "fixture", *LLAMA2_7B, "-o", big])
        models.append(("Llama-2-7B-shaped Q4_K_M fixture", big))

    speed_rows = []
    for name, path in models:
        small = path != big
        pp, tg = (512, 64) if small else (32, 16)
        # q8 multiplies quantized matrices as llama.cpp does; on F32 weights it is f32.
        measures = [("host", p) for p in (("f32",) if "F32" in name else ("f32", "q8"))]
        if small:
            measures.append(("reference", "f32"))  # decode only
        theirs, mine = [], {m: [] for m in measures}
        read_back_from_disk(path)
        for r in range(args.reps):
            if r % 2 == 0:
                theirs.append(llama_speeds(path, pp, tg))
            for backend, precision in measures:
                mine[(backend, precision)].append(td.speeds(backend, path, pp if backend == "host" else 0, tg, precision))
            if r % 2 == 1:
                theirs.append(llama_speeds(path, pp, tg))
        rows = []
        for (backend, precision), rounds in mine.items():
            label = f"engine {precision}" if backend == "host" else "reference"
            for what, n in (("pp", pp), ("tg", tg)):
                if what not in rounds[0]:
                    continue
                ratios = [m[what] / t[what] for m, t in zip(rounds, theirs)]
                if statistics.median(ratios) == float("inf"):
                    raise SystemExit(f"{path}: {label} {what}{n}: the timing noise exceeded the work measured in "
                                     f"half of the rounds; rerun on a quieter machine")
                rows.append(f"| | | | {label} {what}{n} | {statistics.median(m[what] for m in rounds):.1f} | "
                            f"{statistics.median(t[what] for t in theirs):.1f} | {statistics.median(ratios):.2f}x |")
        rows[0] = f"| {name} | {types_of(path)} | {path.stat().st_size / 2**20:.0f} " + rows[0][len("| | | "):]
        speed_rows += rows
        print(rows, flush=True)

    memory_rows = []
    with tempfile.TemporaryDirectory(dir=WORK) as d:
        if not args.skip_7b:
            r, e = pathlib.Path(d) / "ref.h5", pathlib.Path(d) / "engine.h5"
            prompt = ["--tokens", csv(tokens(8)), "-n", "8"]
            steps = []
            if gen:
                steps.append(("`tapdiff fixture` (Llama-2-7B shape, Q4_K_M)", gen))
            steps.append(("`tapdiff run --backend reference` (8 + 8 tokens, every tap)",
                          measure([args.tapdiff, "run", "--backend", "reference", "-m", big, *prompt, "-o", r], td.env)))
            steps.append(("`tapdiff run --backend host` (8 + 8 tokens, every tap)",
                          measure([args.tapdiff, "run", "--backend", "host", "-m", big, *prompt, "-o", e], td.env)))
            # What tracing every tap costs at this size, against the same run without a trace.
            steps.append(("`tapdiff run --backend host` (8 + 8 tokens, no trace)",
                          measure([args.tapdiff, "run", "--backend", "host", "-m", big, *prompt], td.env)))
            traced, untraced = steps[-2][1][0], steps[-1][1][0]
            steps.append(("`tapdiff diff ref.h5 engine.h5`", measure([args.tapdiff, "diff", r, e], td.env)))
            verdict = steps[-1][1][2].strip().splitlines()[0]
            for what, (s, rss, _) in steps:
                memory_rows.append(f"| {what} | {s:.1f} | {rss / 1024:.2f} |")
            memory_rows.append(f"\nTracing every tap: {traced / untraced - 1:+.1%} on the host engine's run (one run each, "
                               f"model and page cache loaded by the reference's run before them).")
            memory_rows.append(f"\nThe diff's verdict: `{verdict}`. Trace size: {r.stat().st_size / 2**20:.0f} MiB each. "
                               f"Model file: {big.stat().st_size / 2**30:.2f} GiB; as float32 its weights would be "
                               f"{parameters(big) * 4 / 2**30:.1f} GiB.")
            r.unlink()
            e.unlink()

        long_rows, long_verdicts = [], []
        n_long = 2048
        prompt = ["--tokens", csv(tokens(n_long)), "-n", "8"]
        # Every tap, then attn.probs left out: its summary (docs/taps.md) stands for it.
        for taps, label in (([], ""), (["--taps", "!*.attn.probs"], " --taps '!*.attn.probs'")):
            r, e = pathlib.Path(d) / "long_ref.h5", pathlib.Path(d) / "long_engine.h5"
            for trace, backend in ((r, "reference"), (e, "host")):
                s, rss, _ = measure([args.tapdiff, "run", "--backend", backend, "-m", SMOLLM2, *prompt, *taps,
                                     "-o", trace], td.env)
                size = trace.stat().st_size
                long_rows.append(f"| `tapdiff run --backend {backend}{label}` | {s:.1f} | {rss / 1024:.2f} | "
                                 f"{size / 2**30:.3f} | {size / (n_long + 8) / 2**20:.3f} |")
            s, rss, out = measure([args.tapdiff, "diff", r, e], td.env)
            long_rows.append(f"| `tapdiff diff` of those | {s:.1f} | {rss / 1024:.2f} | | |")
            long_verdicts.append(f"`{out.strip().splitlines()[0]}`{label and ' (without attn.probs)'}")
            r.unlink()
            e.unlink()

    lines = [
        "# Real model sizes: throughput against llama.cpp, memory, long contexts", "",
        f"Command: `build/venv/bin/python bench/large_models.py` (`make bench` runs it). Machine: "
        f"{cpu_name()}, {os.cpu_count()} cores, {THREADS} threads for every program "
        f"(OMP_WAIT_POLICY=active), llama-cpp-python {importlib.metadata.version('llama_cpp_python')}, Python {sys.version.split()[0]}. "
        "Method: see the docstring of bench/large_models.py.", "",
        f"## Throughput, side by side (tokens/s, medians of {args.reps} interleaved rounds; the ratio: the median of "
        "the rounds' ratios)", "",
        "The engine keeps every matrix in its GGUF encoding. At f32 a decode step's matvec kernel decodes each "
        "block to float32 and multiplies it with float32 activations, and a batch decodes slices for OpenBLAS; at "
        "q8 the activations are quantized to 8 bits and multiplied as integers, as llama.cpp does "
        "(docs/engine.md, \"Precision q8\"). The reference decodes with model/ and multiplies in float32.", "",
        "| model | matrix types | MiB | measure | tapdiff | llama.cpp | tapdiff / llama.cpp |",
        "|---|---|---|---|---|---|---|", *speed_rows, "",
    ]
    if memory_rows:
        lines += ["## The 7B-shaped fixture end to end: time and peak memory of each command", "",
                  "| command | s | peak RSS GiB |", "|---|---|---|", *memory_rows, ""]
    lines += [f"## A {n_long}-token prompt traced and diffed (SmolLM2-135M Q4_1, 8 tokens generated)", "",
              "attn.probs rows hold the keys each position sees: the tracer writes a row up to its last "
              "nonzero block of 64 keys, a prompt's rows in tiles of 64 positions by 64 keys (docs/trace-schema.md), "
              "so a trace grows with n²/2 per head, not n × n_ctx. "
              "Without attn.probs, attn.probs.summary keeps four numbers per head and position.", "",
              "| command | s | peak RSS GiB | trace GiB | trace MiB per token |", "|---|---|---|---|---|",
              *long_rows, "", f"The diffs' verdicts: {'; '.join(long_verdicts)}.", ""]
    pathlib.Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
