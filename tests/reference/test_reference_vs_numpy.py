"""The reference's trace against an independent numpy forward pass, every tap.

Both programs see the same GGUF (the numpy side reads it with gguf-py) and the same tokens;
every tap the reference recorded must agree with numpy's float64 value to 1e-5 relative
(relative to the tap's largest magnitude), and the greedy tokens must be the ones numpy's
logits pick.
"""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from numpy_forward import Model  # noqa: E402
import tapdiff_trace as tt  # noqa: E402

TAPDIFF = os.environ["TAPDIFF_BIN"]
REL_TOL = 1e-5

FIXTURES = {
    "llama-f32": ["--arch", "llama", "--n-layer", "2", "--n-head", "8", "--n-head-kv", "2"],
    "llama-q8": ["--arch", "llama", "--type", "Q8_0", "--n-ff", "96"],
    "qwen2-tied": ["--arch", "qwen2", "--tied", "--n-head", "4", "--n-head-kv", "1"],
    # Mixtral's layout: a llama GGUF with 4 experts, 2 per token (and of Q4_K experts).
    "mixtral-f32": ["--arch", "llama", "--n-expert", "4", "--n-expert-used", "2"],
    "mixtral-q4k": ["--arch", "llama", "--n-embd", "256", "--n-ff", "256", "--n-layer", "1",
                    "--n-expert", "4", "--n-expert-used", "2", "--type", "Q4_K"],
    "qwen2-q4k": ["--arch", "qwen2", "--n-embd", "256", "--n-ff", "512", "--n-head", "4",
                  "--n-head-kv", "2", "--n-layer", "1", "--type", "Q4_K"],
}


def read_trace(path):
    """{(name, layer, position): row} from a tapdiff trace, read with python/tapdiff_trace.py."""
    rows = {}
    with tt.TraceReader(str(path)) as trace:
        assert trace.complete
        tokens = trace.tokens.tolist()
        for tap in trace.taps():
            positions, values = trace.read(tap.name, tap.layer)
            for position, row in zip(positions, values):
                rows[(tap.name, tap.layer, int(position))] = row.ravel()
    return tokens, rows


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_every_tap_matches_numpy(tmp_path, fixture):
    model = tmp_path / f"{fixture}.gguf"
    trace = tmp_path / f"{fixture}.h5"
    subprocess.run([TAPDIFF, "fixture", "--seed", "11", *FIXTURES[fixture], "-o", model],
                   check=True, capture_output=True)
    prompt = [1, 70, 200, 33, 5]
    p = subprocess.run([TAPDIFF, "run", "--backend", "reference", "-m", model, "--tokens",
                        ",".join(map(str, prompt)), "-n", "6", "-o", trace],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    tokens, rows = read_trace(trace)
    assert tokens[:len(prompt)] == prompt and len(tokens) == len(prompt) + 6

    expected = Model(str(model)).run(tokens[:-1], n_ctx=len(tokens))
    compared = 0
    for key, want in expected.items():
        name, layer, pos = key
        if name == "output" and pos < len(prompt) - 1:
            assert key not in rows, "logits are recorded only where a token is chosen"
            continue
        assert key in rows, f"reference did not record {key}"
        got = rows[key]
        scale = max(np.abs(want).max(), 1e-30)
        err = np.abs(got.astype(np.float64) - want).max() / scale
        assert err <= REL_TOL, f"{key}: relative error {err:.3g} > {REL_TOL}"
        compared += 1
    assert compared == len(rows), "the trace holds taps numpy does not know"
    # Greedy: each generated token is the argmax of numpy's logits at the position before it.
    for pos in range(len(prompt) - 1, len(tokens) - 1):
        assert tokens[pos + 1] == int(np.argmax(expected[("output", -1, pos)])), pos
