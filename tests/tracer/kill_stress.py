"""SIGKILL stress for the trace writer (not a CTest test: it is randomised and takes ~30 s).

Starts trace_test_writer, kills it with SIGKILL after a random delay, and checks that the
trace opens, and that every committed row holds exactly the values the writer recorded.
Kills that land before the trace file exists are not counted (there is nothing to read).

    build/venv/bin/python tests/tracer/kill_stress.py build/tests/tracer/trace_test_writer 150

Cited by docs/trace-schema.md ("What holds under HDF5 1.10").
"""

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import tapdiff_trace as tt  # noqa: E402

LAYER_TAPS = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_q.rope", "attn_k.rope"]
LAYERS, WIDTH = 4, 1024


def expected_rows(tap, layer, positions):
    """tests/tracer/support/test_values.hpp, vectorised: (len(positions), WIDTH)."""
    k = (tap * 131 + (layer + 1) * 17 + positions[:, None] * 7 + np.arange(WIDTH)[None, :]) % 1000
    return (k / 8.0 - 60.0).astype(np.float32)


def check(path):
    with tt.TraceReader(path) as r:
        present = {(t.name, t.layer) for t in r.taps()}
        for tap, name in enumerate(LAYER_TAPS):
            for layer in range(LAYERS):
                if (name, layer) not in present:
                    continue
                positions, values = r.read(name, layer)
                assert (positions == np.arange(len(positions))).all(), f"{name}/{layer} positions"
                expected = expected_rows(tap, layer, positions)
                assert (values == expected).all(), f"{name}/{layer} values"
        return r.committed_steps


def main():
    writer, trials = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 150
    variants = [[], ["--commit-every", "3"], ["--compress"], ["--lazy-taps"],
                ["--prompt", "24"], ["--prompt", "24", "--lazy-taps"],  # a prompt goes to batch
                ["--prompt", "24", "--compress"]]
    failures, counted, steps = 0, 0, []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "killed.h5")
        for trial in range(trials):
            for leftover in (path, path + ".partial"):
                if os.path.exists(leftover):
                    os.remove(leftover)
            extra = variants[trial % len(variants)]
            args = [writer, "--out", path, "--steps", "1000000", "--layers", str(LAYERS),
                    "--taps", str(len(LAYER_TAPS)), "--width", str(WIDTH)] + extra
            child = subprocess.Popen(args, stdout=subprocess.DEVNULL)
            time.sleep(random.uniform(0.0, 0.08))
            child.send_signal(signal.SIGKILL)
            child.wait()
            if not os.path.exists(path):
                continue
            counted += 1
            try:
                steps.append(check(path))
            except Exception as e:  # noqa: BLE001 - report every kind of failure
                failures += 1
                print(f"trial {trial} {' '.join(extra) or 'default'}: {e}")
    print(f"{failures} unreadable or wrong of {counted} killed traces "
          f"(committed steps min {min(steps, default=0)}, max {max(steps, default=0)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
