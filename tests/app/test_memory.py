"""Memory bounds of real model sizes, measured: the engine holds matrices in their GGUF encoding
(a quantized model costs about its file, not its float32 size), the reference keeps float32
matrices only within --weight-cache (the rest dequantized on use, with identical results), and a
trace stores each attn.probs row only over the keys its position sees."""
import os
import subprocess

import h5py
import numpy as np
import pytest

from tapdiff_trace import TraceReader

TAPDIFF = os.environ["TAPDIFF_BIN"]
MiB = 2**20
# 4 layers, n_embd 1024, n_ff 4096, vocabulary 8192: 84 M parameters, 336 MiB as float32,
# about 47 MiB in Q4_K.
SHAPE = ["--n-layer", 4, "--n-embd", 1024, "--n-head", 8, "--n-head-kv", 8, "--n-ff", 4096,
         "--n-vocab", 8192, "--type", "Q4_K"]
FLOAT32_BYTES = 4 * (4 * (4 * 1024 * 1024 + 3 * 1024 * 4096) + 2 * 8192 * 1024)


def run(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("memory")
    tiny, big = d / "tiny.gguf", d / "big.gguf"
    assert run("fixture", "-o", tiny).returncode == 0
    r = run("fixture", *SHAPE, "-o", big)
    assert r.returncode == 0, r.stderr
    return d, tiny, big


def rss(*args):
    p = subprocess.Popen([TAPDIFF, *map(str, args)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    err = p.stderr.read().decode()
    assert os.waitstatus_to_exitcode(status) == 0, err
    return usage.ru_maxrss * 1024


def test_engine_holds_quantized_weights_in_their_encoding(models):
    d, tiny, big = models
    base = rss("run", "--backend", "host", "-m", tiny, "--tokens", "1,2,3,4", "-n", 4)
    grown = rss("run", "--backend", "host", "-m", big, "--tokens", "1,2,3,4", "-n", 4) - base
    # File (47 MiB, mapped), one decoded matrix for the prefill GEMMs and activations: well under
    # the 336 MiB the float32 weights alone would take.
    assert grown < FLOAT32_BYTES / 2, f"engine grew {grown / MiB:.0f} MiB on a {FLOAT32_BYTES / MiB:.0f} MiB float32 model"


def test_reference_keeps_float32_only_within_its_cache(models):
    d, tiny, big = models
    args = ["run", "-m", big, "--tokens", "1,2,3", "-n", 2]
    base = rss("run", "-m", tiny, "--tokens", "1,2,3", "-n", 2)
    streamed = rss(*args, "--weight-cache", 0, "-o", d / "streamed.h5") - base
    kept = rss(*args, "-o", d / "kept.h5") - base
    assert streamed < FLOAT32_BYTES / 2, f"reference grew {streamed / MiB:.0f} MiB with --weight-cache 0"
    # Every matrix but the embedding table (read a row per token) is kept by default.
    assert kept > FLOAT32_BYTES * 0.75, f"the default cache kept only {kept / MiB:.0f} MiB"
    with TraceReader(str(d / "kept.h5")) as a, TraceReader(str(d / "streamed.h5")) as b:
        taps = list(a.taps())
        assert len(taps) == len(list(b.taps())) > 0
        for tap in taps:
            pa, ra = a.read(tap.name, tap.layer)
            pb, rb = b.read(tap.name, tap.layer)
            assert np.array_equal(pa, pb) and np.array_equal(ra, rb), f"{tap.name} layer {tap.layer} differs"


def test_attention_rows_are_stored_over_the_visible_keys(models):
    d, tiny, _ = models
    n = 320
    trace = d / "long.h5"
    r = run("run", "-m", tiny, "--tokens", ",".join(str(1 + i % 300) for i in range(n)), "-n", 1, "-o", trace)
    assert r.returncode == 0, r.stderr
    with h5py.File(trace, "r") as f:
        data = f["taps/attn.probs/data"]
        rows, slots, heads, keys = data.shape
        assert rows == n and keys >= n
        dense = rows * slots * heads * keys * 4
        # Blocks of 64 keys up to each position: about half the square, never all of it.
        assert data.id.get_storage_size() < 0.65 * dense
        probs = data[:, 0]
    for p in (0, 63, 64, 200, n - 1):
        assert np.allclose(probs[p, :, : p + 1].sum(axis=1), 1, atol=1e-5)
        assert not probs[p, :, p + 1:].any(), f"position {p}: nonzero past its keys"
