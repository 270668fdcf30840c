"""`tapdiff check --invariance` end to end: the engine prefilling its prompt in one batch against
itself prefilling it token by token and in chunks. A clean engine is invariant at every
precision; the chunked-prefill KV-offset fault is found at the first chunk boundary, by the
chunkings that have one, and is invisible to a one-batch run against the reference."""
import json
import os
import subprocess

import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = "1,20,40,60,80,90,100,110,120,130"  # 10 tokens: chunks of 2, 3 and 7 all cut it
N_PREDICT = 4


def run(*args, code=None):
    p = subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)
    if code is not None:
        assert p.returncode == code, f"exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


@pytest.fixture(scope="module", params=[("llama", "Q8_0"), ("qwen2", "F16")])
def model(request, tmp_path_factory):
    arch, wtype = request.param
    path = tmp_path_factory.mktemp(arch) / f"{arch}.gguf"
    run("fixture", "--arch", arch, "--type", wtype, "-o", path, code=0)
    return path


def table_rows(stdout):
    """{chunking: line} from the table check --invariance prints before the report."""
    rows = {}
    for line in stdout.splitlines()[1:]:
        if not line.strip():
            break
        key = "token by token" if line.startswith("token by token") else " ".join(line.split()[:3])
        rows[key] = line
    return rows


@pytest.mark.parametrize("precision", ["f32", "f16", "bf16"])
def test_a_clean_engine_is_invariant(model, precision):
    p = run("check", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--precision", precision,
            "--invariance", code=0)
    rows = table_rows(p.stdout)
    assert set(rows) == {"token by token", "chunks of 2", "chunks of 3", "chunks of 7"}, p.stdout
    assert all(" PASS " in line for line in rows.values()), p.stdout


def test_the_chunked_prefill_kv_offset_is_found_at_the_first_chunk_boundary(model, tmp_path):
    p = run("check", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--invariance", "--inject",
            "kv-chunk-offset", "--chunks", "1,3,7", "--format", "json", "--report", tmp_path / "report.md", code=1)
    report = json.loads(p.stdout)
    # The report is the first chunking that differs: chunks of 3, whose second chunk starts at 3.
    assert report["first_divergence"]["tap"] == "blk.0.attn.probs"
    assert report["first_divergence"]["position"] == 3
    assert report["diagnosis"]["class"] == "kv-cache", report["diagnosis"]
    assert report["expected"]["path"].endswith("one-batch.h5")
    assert report["actual"]["path"].endswith("chunk-3.h5")
    # One token at a time never takes the batched write; every other chunking has a boundary.
    rows = table_rows(p.stderr)
    assert " PASS " in rows["token by token"], p.stderr
    assert "blk.0.attn.probs @ 3 · kv-cache" in rows["chunks of 3"], p.stderr
    assert "blk.0.attn.probs @ 7 · kv-cache" in rows["chunks of 7"], p.stderr
    assert (tmp_path / "report.md").exists()


def test_the_fault_hides_from_a_one_batch_check_and_shows_with_a_chunked_prefill(model):
    run("check", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--inject", "kv-chunk-offset", code=0)
    p = run("check", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--inject", "kv-chunk-offset",
            "--prefill-chunk", "4", "--format", "json", code=1)
    report = json.loads(p.stdout)
    assert (report["first_divergence"]["tap"], report["first_divergence"]["position"]) == ("blk.0.attn.probs", 4)
    assert report["diagnosis"]["class"] == "kv-cache"
    assert report["actual"]["producer_settings"]["prefill_chunk"] == 4


def test_a_bug_of_the_one_batch_path_is_found_in_the_one_batch_run(model):
    # Without a causal mask the one-batch prefill is wrong and token by token is right: the
    # difference is located in the one-batch run, not cleared as inherited.
    p = run("check", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--invariance", "--inject",
            "causal-mask-off", "--chunks", "1", "--format", "json", code=1)
    report = json.loads(p.stdout)
    assert report["expected"]["path"].endswith("one-batch.h5") and report["diagnosis"]["in_expected"]
    assert (report["first_divergence"]["tap"], report["first_divergence"]["position"]) == ("blk.0.attn.probs", 0)
    assert report["diagnosis"]["class"] == "attention-mask"
    assert "in the one-batch run" in table_rows(p.stderr)["token by token"]


def test_bad_input(model):
    p = run("check", "-m", model, "--tokens", "1,2,3", "--invariance", "--chunks", "3,8", code=2)
    assert "--chunks" in p.stderr and "3-token prompt" in p.stderr
    p = run("check", "-m", model, "--tokens", "1,2,3", "--invariance", "--golden", "x.h5", code=2)
    assert "--golden" in p.stderr
    p = run("run", "-m", model, "--tokens", "1,2,3", "--prefill-chunk", "2", code=2)
    assert "--prefill-chunk" in p.stderr and "reference" in p.stderr
    p = run("run", "--backend", "host", "-m", model, "--tokens", "1,2,3", "--prefill-chunk", "-1", code=2)
    assert "--prefill-chunk" in p.stderr
