"""`tapdiff check --corpus`: the shipped text in windows through the reference and the engine,
scored as llama-perplexity --kl-divergence does. Every statistic is checked against a numpy
computation of llama.cpp's formulae (tools/perplexity/perplexity.cpp) on the logits the window
traces hold; a clean engine passes its precision's gate, a small real fault fails it."""
import json
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
from tapdiff_trace import stack_rows

TAPDIFF = os.environ["TAPDIFF_BIN"]
ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / "fixtures" / "corpus" / "stories.txt"
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def run(*args, code=None, env=None):
    p = subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=600, env=env)
    if code is not None:
        assert p.returncode == code, f"exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "qwen2.gguf"
    run("fixture", "--arch", "qwen2", "-o", path, code=0)
    return path


def logits(trace):
    with h5py.File(trace, "r", locking=False) as f:
        g = f["taps/output"]
        rows, _, batch = f["committed"][g.attrs["index"][0]]
        return stack_rows(g, 0, 0, rows, batch).astype(np.float64), f["tokens"][: f.attrs["committed_tokens"]]


def mean_and_uncertainty(values):
    n = len(values)
    mean = values.sum() / n
    var = (values ** 2).sum() / n - mean * mean
    return mean, (np.sqrt(var / (n - 1)) if var > 0 and n > 10 else 0.0)


def percentile(sorted_values, fraction):
    p = fraction * (len(sorted_values) - 1)
    i = int(p)
    p -= i
    return (1 - p) * sorted_values[i] + p * sorted_values[min(i + 1, len(sorted_values) - 1)]


def median(sorted_values):
    n = len(sorted_values)
    return 0.5 * (sorted_values[n // 2] + sorted_values[n // 2 - 1]) if n % 2 == 0 else sorted_values[n // 2]


def llama_cpp_statistics(kept, n_windows, window):
    """llama.cpp's kl_divergence() statistics, from the kept window traces."""
    nll, nll_base, kld, p_diff, same = [], [], [], [], []
    for w in range(n_windows):
        base, tokens = logits(kept / f"window-{w}-expected.h5")
        actual, tokens_actual = logits(kept / f"window-{w}-actual.h5")
        assert (tokens == tokens_actual).all()
        first = window // 2
        for j in range(first, window - 1):
            lb = base[j] - base[j].max() - np.log(np.exp(base[j] - base[j].max()).sum())
            la = actual[j] - actual[j].max() - np.log(np.exp(actual[j] - actual[j].max()).sum())
            t = tokens[j + 1]
            nll.append(-la[t])
            nll_base.append(-lb[t])
            kld.append((np.exp(lb) * (lb - la)).sum())
            p_diff.append(np.exp(la[t]) - np.exp(lb[t]))
            same.append(np.argmax(la) == np.argmax(lb))
    nll, nll_base, kld, p_diff = map(np.array, (nll, nll_base, kld, p_diff))
    n = len(kld)
    log_ppl, log_ppl_unc = mean_and_uncertainty(nll)
    log_base, log_base_unc = mean_and_uncertainty(nll_base)
    # llama.cpp's sqrt(unc² + unc_base² - 2 cov), as the uncertainty of the per-token differences
    # (equal in exact arithmetic; the subtraction is rounding noise when the sides agree closely).
    log_ratio, log_ratio_unc = mean_and_uncertainty(nll - nll_base)
    cov = (log_ppl_unc ** 2 + log_base_unc ** 2 - log_ratio_unc ** 2) / 2
    ks, ps = np.sort(kld), np.sort(p_diff)
    mse, mse_unc = mean_and_uncertainty(p_diff ** 2)
    same_top = np.mean(same)
    return {
        "scored": n,
        "ppl.actual": np.exp(log_ppl), "ppl.actual_unc": np.exp(log_ppl) * log_ppl_unc,
        "ppl.expected": np.exp(log_base), "ppl.expected_unc": np.exp(log_base) * log_base_unc,
        "ppl.log_cor": cov / (log_ppl_unc * log_base_unc),
        "ppl.log_ratio": log_ratio, "ppl.log_ratio_unc": log_ratio_unc, "ppl.ratio": np.exp(log_ratio),
        "kld.mean": mean_and_uncertainty(kld)[0], "kld.mean_unc": mean_and_uncertainty(kld)[1],
        "kld.max": ks[-1], "kld.min": ks[0], "kld.median": median(ks),
        **{f"kld.percentiles.{q:g}": percentile(ks, q / 100) for q in (99.9, 99, 95, 90, 10, 5, 1, 0.1)},
        "p_diff.mean": mean_and_uncertainty(p_diff)[0], "p_diff.mean_unc": mean_and_uncertainty(p_diff)[1],
        "p_diff.max": ps[-1], "p_diff.min": ps[0], "p_diff.median": median(ps),
        **{f"p_diff.percentiles.{q:g}": percentile(ps, q / 100) for q in (99.9, 99, 95, 90, 75, 25, 10, 5, 1, 0.1)},
        "p_diff.rms": np.sqrt(mse), "p_diff.rms_unc": 0.5 / np.sqrt(mse) * mse_unc,
        "same_top.rate": same_top, "same_top.unc": np.sqrt(same_top * (1 - same_top) / (n - 1)),
    }


def lookup(report, dotted):
    value = report
    for key in dotted.split(".", 2) if dotted.startswith(("kld.percentiles", "p_diff.percentiles")) else dotted.split("."):
        value = value[key]
    return value


def check_against_numpy(report, kept):
    expected = llama_cpp_statistics(kept, report["n_windows"], report["window"])
    for key, value in expected.items():
        got = lookup(report, key)
        assert got == pytest.approx(value, rel=1e-6, abs=1e-12), f"{key}: tapdiff {got}, numpy {value}"


# The fixture's random weights give near-uniform next-token distributions (PPL near the
# vocabulary size): KL divergences are small in absolute terms, so its gate is given here; on a
# real model the precision's own gate applies (test_smollm2_fails_with_a_small_real_fault).
FIXTURE_GATE = ["--max-kld-mean", "1e-10"]


def test_a_fault_fails_the_gate_and_every_statistic_is_llama_cpps(qwen2, tmp_path):
    kept = tmp_path / "kept"
    p = run("check", "-m", qwen2, "--corpus", TEXT, "--window", 64, "--max-windows", 6, *FIXTURE_GATE,
            "--inject", "rope-wrong-base", "--format", "json", "--keep-traces", kept, code=1)
    report = json.loads(p.stdout)
    assert report["verdict"] == "diverged" and report["actual"] == "engine-host f32, fault rope-wrong-base"
    assert report["n_windows"] == 6 and report["scored"] == 6 * 31
    assert report["failures"][0].startswith("mean KLD"), report["failures"]
    # Where: the window of the largest KLD again with every tap, diffed.
    assert report["worst"]["finding"].startswith("blk.0.attn_q.rope @ 1 · rope"), report["worst"]
    assert [Path(t).name for t in report["worst"]["traces"]] == ["worst-window-expected.h5", "worst-window-actual.h5"]
    check_against_numpy(report, kept)
    # The same gate passes the clean engine.
    run("check", "-m", qwen2, "--corpus", TEXT, "--window", 64, "--max-windows", 6, *FIXTURE_GATE, code=0)


@pytest.mark.parametrize("precision", ["f32", "f16", "bf16"])
def test_a_clean_engine_passes_its_precisions_gate(qwen2, tmp_path, precision):
    kept = tmp_path / "kept"
    p = run("check", "-m", qwen2, "--corpus", TEXT, "--window", 64, "--max-windows", 4, "--precision", precision,
            "--format", "json", "--keep-traces", kept, code=0)
    report = json.loads(p.stdout)
    assert report["verdict"] == "pass" and report["failures"] == [] and report["worst"]["finding"] is None
    check_against_numpy(report, kept)


def test_the_text_report_is_laid_out_as_llama_perplexity_prints_it(qwen2, tmp_path):
    # A temporary directory of its own: another run's (a killed one's) leftovers are not this run's.
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = run("check", "-m", qwen2, "--corpus", TEXT, "--window", 32, "--max-windows", 2, "--report",
            tmp_path / "r.md", code=0, env=dict(os.environ, TMPDIR=str(tmp)))
    for line in ("====== Perplexity statistics ======", "Mean PPL(Q)                   :", "Mean    KLD:",
                 "99.9%   KLD:", "Median  KLD:", "RMS Δp    :", "Same top p:"):
        assert line in p.stdout, line
    assert "windows of 32" in p.stdout and (tmp_path / "r.md").read_text().startswith("## Corpus check: PASS")
    # Without the files: the window traces are removed as soon as they are scored, their
    # directory at the end.
    assert not list(tmp.iterdir())


def test_a_token_file_and_the_gate_options(qwen2, tmp_path):
    tokens = tmp_path / "ids.tokens"
    tokens.write_text("\n".join(" ".join(str((7 * i * i + 3 * i) % 300 + 1) for i in range(r * 16, r * 16 + 16))
                                for r in range(8)))
    report = json.loads(run("check", "-m", qwen2, "--corpus", tokens, "--window", 32, "--max-kld-mean", 0,
                            "--format", "json", code=1).stdout)
    assert report["n_tokens"] == 128 and report["n_windows"] == 4
    assert report["gate"]["max_kld_mean"] == 0 and report["failures"][0].startswith("mean KLD")


def test_bad_input(qwen2, tmp_path):
    p = run("check", "-m", qwen2, "--corpus", tmp_path / "missing.txt", code=2)
    assert "missing.txt" in p.stderr
    short = tmp_path / "short.tokens"
    short.write_text("1 2 3")
    p = run("check", "-m", qwen2, "--corpus", short, "--window", 16, code=2)
    assert "short.tokens" in p.stderr and "fewer than one window" in p.stderr
    bad = tmp_path / "bad.tokens"
    bad.write_text("1 2 x 4")
    p = run("check", "-m", qwen2, "--corpus", bad, code=2)
    assert "bad.tokens" in p.stderr and "item 3" in p.stderr
    assert run("check", "-m", qwen2, "--corpus", TEXT, "--tokens", "1,2", code=2).returncode == 2
    p = run("check", "-m", qwen2, "--corpus", TEXT, "--window", 32, "--max-windows", 1, "--format", "junit", code=2)
    assert "--format junit" in p.stderr


@pytest.mark.skipif(not SMOLLM2.exists(), reason="models/SmolLM2-135M-Instruct.Q4_1.gguf absent (scripts/fetch-models.sh)")
@pytest.mark.parametrize("precision", ["f32", "f16", "bf16"])
def test_smollm2_passes_at_every_precision(precision, tmp_path):
    kept = tmp_path / "kept"
    p = run("check", "-m", SMOLLM2, "--corpus", TEXT, "--max-windows", 3, "--precision", precision,
            "--format", "json", "--keep-traces", kept, code=0)
    report = json.loads(p.stdout)
    assert report["window"] == 128 and report["scored"] == 3 * 63
    check_against_numpy(report, kept)


@pytest.mark.skipif(not SMOLLM2.exists(), reason="models/SmolLM2-135M-Instruct.Q4_1.gguf absent (scripts/fetch-models.sh)")
def test_smollm2_fails_with_a_small_real_fault():
    # llama-2's RoPE base (1e4) instead of SmolLM2's 1e5: the perplexity moves by a few percent,
    # within its own uncertainty on this much text; the KL divergence is far over the f16 gate.
    report = json.loads(run("check", "-m", SMOLLM2, "--corpus", TEXT, "--max-windows", 3, "--precision", "f16",
                            "--inject", "rope-wrong-base", "--format", "json", code=1).stdout)
    assert report["kld"]["mean"] > 100 * report["gate"]["max_kld_mean"], report["kld"]
    assert report["failures"][0].startswith("mean KLD")
    assert report["worst"]["finding"].startswith("blk.0.attn_q.rope @ 1 · rope"), report["worst"]
