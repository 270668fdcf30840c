"""Bugs outside the fault catalogue, written into traces by hand as a new user found them: the
diff must find each where it starts and never name a wrong class (a wrong class is a false
lead; "unexplained" is not). The helpers every file of unwritten_bugs/ shares: running tapdiff,
reading and writing a tap's rows, asking the diff."""
import json
import os
import shutil
import subprocess

import h5py
import numpy as np

from tapdiff_trace import stack_rows

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = "1,70,200,33,5,91"
K_SHAPE = ["--n-embd", "256", "--n-ff", "512", "--n-head", "8", "--n-head-kv", "2"]  # rows of Q4_K's 256


def run(*args, cwd=None):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def tap_slot(f, name, layer):
    stack = f["taps"][name]
    slot = list(stack.attrs["layers"]).index(layer)
    rows, _, batch = f["committed"][stack.attrs["index"][slot]]
    return stack, slot, int(rows), int(batch)


def read_tap(path, name, layer):
    with h5py.File(path, "r") as f:
        stack, slot, rows, batch = tap_slot(f, name, layer)
        return stack_rows(stack, slot, 0, rows, batch)


def write_tap(path, name, layer, values):
    with h5py.File(path, "r+") as f:
        stack, slot, rows, batch = tap_slot(f, name, layer)
        values = np.asarray(values, np.float32)
        if batch:
            stack["batch"][slot, :batch] = values[:batch]
        if rows > batch:
            stack["data"][batch:rows, slot] = values[batch:rows]


def traced(d, name, *fixture_args, n=3, run_args=()):
    """A fixture model d/name.gguf and its reference and host traces, d/ref.h5 and d/eng.h5."""
    model = d / f"{name}.gguf"
    p = run("fixture", *fixture_args, "-o", model)
    assert p.returncode == 0, p.stderr
    for backend, out in (("reference", "ref.h5"), ("host", "eng.h5")):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", n, *run_args, "-o", d / out)
        assert p.returncode == 0, p.stderr
    return model


def diff_json(expected, actual, *args, cwd=None):
    p = run("diff", expected, actual, "--format", "json", *args, cwd=cwd)
    return p.returncode, json.loads(p.stdout)


def rounded_to(dtype, rows):
    rows = np.asarray(rows, np.float32)
    if dtype == "float16":
        return rows.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16-truncated":  # the low 16 bits dropped
        return (np.ascontiguousarray(rows).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    bits = rows.view(np.uint32).astype(np.uint64)  # bfloat16: the high 16 bits, rounded to nearest even
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def causal_probs(q, k, n_head, n_keys, kv_of_head, scores=lambda dots, d: dots / np.sqrt(d), quiet=False,
                 window=0, own_key=True, half=False, half_exp=False):
    """softmax(scores(q_h · K_g)) over keys 0..p (p - window + 1..p with a window; without its own
    key, 0..p-1 and nothing at 0), query head h reading kv head kv_of_head[h]; quiet: 1 added to
    the softmax's denominator; half: the scores and the probabilities rounded to f16 (a softmax of
    a half tensor), or to bf16 where half is "bfloat16"; half_exp: only exp(s - max) rounded to f16."""
    half = "float16" if half is True else half
    n, d = q.shape[0], q.shape[1] // n_head
    q = q.reshape(n, n_head, d).astype(np.float64)
    k = k.reshape(n, -1, d).astype(np.float64)
    probs = np.zeros((n, n_head, n_keys))
    for p in range(n):
        for h in range(n_head):
            first, end = max(0, p - window + 1) if window else 0, p + 1 if own_key else p
            if end == first:
                continue
            s = scores(k[first:end, kv_of_head[h]] @ q[p, h], d)
            if half:
                s = rounded_to(half, s).astype(np.float64)
            e = np.exp(s - s.max())
            if half_exp:
                e = e.astype(np.float16).astype(np.float64)
            probs[p, h, first:end] = e / (e.sum() + (np.exp(-s.max()) if quiet else 0))
            if half:
                probs[p, h, first:end] = rounded_to(half, probs[p, h, first:end])
    return probs


def replayed_probs(trace, layer, **how):
    """attn.probs of `layer` replayed from the trace's own q and K by causal_probs(**how), for the
    fixtures' 4 query heads over 2 kv heads."""
    q, k = read_tap(trace, "attn_q.rope", layer), read_tap(trace, "attn_k.rope", layer)
    keys = read_tap(trace, "attn.probs", layer).shape[2]
    return causal_probs(q.reshape(q.shape[0], -1), k.reshape(k.shape[0], -1), 4, keys, [0, 0, 1, 1], **how)


def with_decode_probs(llama, tmp_path, layer, **how):
    """A copy of the llama fixture's engine trace whose attn.probs of `layer` in decode steps are
    replayed by causal_probs(**how), the prompt's rows as they were; the copy and the prompt length."""
    bad = tmp_path / "eng.h5"
    shutil.copy(llama / "eng.h5", bad)
    prompt = len(PROMPT.split(","))
    probs = read_tap(bad, "attn.probs", layer)
    probs[prompt:] = replayed_probs(bad, layer, **how)[prompt:]
    write_tap(bad, "attn.probs", layer, probs)
    return bad, prompt

def gguf_tensor(model, name):
    from gguf import GGUFReader
    return next(t for t in GGUFReader(model).tensors if t.name == name).data.astype(np.float64)


def rmsnorm(x, w, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def diagnose(expected, actual, model, tap, words, bug_class, evidence="reproduced", position=None):
    """The first divergence at tap (and position, when given), diagnosed as bug_class with this
    evidence by a variant containing words; the diagnosis."""
    code, r = diff_json(expected, actual, "--model", model)
    first = r["first_divergence"]
    assert code == 1 and first["tap"] == tap and position in (None, first["position"]), first
    d = r["diagnosis"]
    assert d["class"] == bug_class and d["evidence"] == evidence and words in d["variant"], d
    return d


def gguf_field(model, key):
    from gguf import GGUFReader
    field = GGUFReader(model).fields[key]
    return field.parts[field.data[0]][0]
