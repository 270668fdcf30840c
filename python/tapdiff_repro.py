#!/usr/bin/env python3
"""A tapdiff repro, replayed with numpy: the finding's op computed in float64 from the actual
trace's own inputs (actual.h5) and the model part's weights (model.gguf), compared with the
actual output. Exit 1 with the metrics when some position diverges beyond the finding's NMSE
threshold, 0 when none does, 2 for bad input. Needs numpy, h5py and gguf (pip install).

    python3 repro.py [DIR] [--actual FILE.npy]

--actual: your kernel's output instead of the recorded one, rows in the order of the tap's
positions in actual.h5 (or one row: the finding's position). Written by `tapdiff repro`;
the ops follow tapdiff's reference (reference/ops.hpp) and docs/taps.md.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import h5py
import numpy as np


class ReproError(Exception):
    pass


def read_tap(f, name, layer):
    """{position: flat row} of tap (name, layer) in an open tapdiff trace (docs/trace-schema.md)."""
    for stack in f["taps"].values():
        if stack.attrs["name"] != name or layer not in list(stack.attrs["layers"]):
            continue
        s = list(stack.attrs["layers"]).index(layer)
        counts = f["committed"][stack.attrs["index"][s]]
        rows, n_runs = counts[0], counts[1]
        batch = counts[2] if len(counts) > 2 else 0  # format 3: the first rows are in "batch"
        if rows == 0:
            continue
        parts = ([stack["batch"][s, :batch]] if batch > 0 else []) + [stack["data"][batch:rows, s]]
        data = np.concatenate(parts).astype(np.float64).reshape(rows, -1)  # rows flattened
        runs = stack["runs"][:n_runs, s]
        ends = list(runs[1:, 0]) + [rows]
        out = {}
        for (first_row, first_position), end in zip(runs, ends):
            for i in range(end - first_row):
                out[int(first_position + i)] = data[first_row + i]
        return out
    return {}


class Weights:
    """The part's tensors, dequantized by gguf-py, as (rows, cols) float64 (1-D: a vector)."""

    def __init__(self, path, hp):
        from gguf import GGUFReader
        from gguf.quants import dequantize
        self.reader, self.dequantize, self.hp, self.cache = GGUFReader(path), dequantize, hp, {}

    def tensor(self, name):
        if name not in self.cache:
            t = next((t for t in self.reader.tensors if t.name == name), None)
            if t is None:
                raise ReproError(f"model.gguf holds no tensor {name}")
            values = np.asarray(self.dequantize(t.data, t.tensor_type), dtype=np.float64)
            self.cache[name] = values.reshape(-1, int(t.shape[0])) if len(t.shape) > 1 else values.reshape(-1)
        return self.cache[name]

    def matrix(self, name):
        """Fused tensors (phi3 attn_qkv, ffn_up = [gate; up]) are read by their parts' names."""
        hp, block, part = self.hp, name.rsplit(".", 2)[0], name.rsplit(".", 2)[1]
        q, kv, ff = hp["n_head"] * hp["head_dim"], hp["n_head_kv"] * hp["head_dim"], hp["n_ff"]
        if hp["fused_qkv"] and part in ("attn_q", "attn_k", "attn_v"):
            w = self.tensor(f"{block}.attn_qkv.weight")
            return {"attn_q": w[:q], "attn_k": w[q:q + kv], "attn_v": w[q + kv:q + 2 * kv]}[part]
        if hp["fused_gate_up"] and part in ("ffn_gate", "ffn_up"):
            w = self.tensor(f"{block}.ffn_up.weight")
            return w[:ff] if part == "ffn_gate" else w[ff:2 * ff]
        return self.tensor(name)


def rms(x, w, eps):
    return x / math.sqrt(float(np.mean(x * x)) + eps) * (1.0 if w is None else w)


def rope(x, heads, position, hp, layer, factors):
    d, n_rot = hp["head_dim"], hp["n_rot"]
    if hp.get("nope_period", 0) and (layer + 1) % hp["nope_period"] == 0:  # a NoPE layer (SmolLM3)
        return x.copy()
    sliding = hp["sliding_window"] > 0 and layer % hp["swa_period"] < hp["swa_period"] - 1
    base = hp["rope_freq_base_swa"] if sliding and hp["rope_freq_base_swa"] > 0 else hp["rope_freq_base"]
    out = x.copy().reshape(heads, d)
    half = n_rot // 2
    i = np.arange(half)
    theta = position * np.power(float(base), -2.0 * i / n_rot) / (1.0 if factors is None else factors[:half])
    scaling = hp.get("rope_scaling", {"type": "none"})
    magnitude = 1.0
    if scaling["type"] == "longrope":  # its factors came in as `factors`
        magnitude = scaling["attn_factor"]
    elif scaling["type"] != "none" and not (sliding and not scaling["sliding_layers"]):
        factor = scaling["factor"]
        if scaling["type"] == "linear":
            theta = theta / factor
        else:  # yarn: pairs below the beta_fast correction dim keep θ, those past beta_slow's take θ / factor
            def turning(beta):
                return n_rot * math.log(scaling["n_ctx_orig"] / (beta * 2 * math.pi)) / (2 * math.log(base))
            low = max(0.0, math.floor(turning(scaling["beta_fast"])))
            high = min(n_rot - 1.0, math.ceil(turning(scaling["beta_slow"])))
            kept = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
            theta = theta / factor * (1.0 - kept) + theta * kept
            magnitude = scaling["attn_factor"] * (0.1 * math.log(factor) + 1.0)
    a_idx, b_idx = (2 * i, 2 * i + 1) if hp["rope_pairing"] == "norm" else (i, i + half)
    a, b = out[:, a_idx].copy(), out[:, b_idx].copy()
    cos, sin = np.cos(theta) * magnitude, np.sin(theta) * magnitude
    out[:, a_idx] = a * cos - b * sin
    out[:, b_idx] = a * sin + b * cos
    return out.reshape(-1)


def softcap(x, cap):
    return cap * np.tanh(x / cap) if cap > 0 else x


def residual_factor(hp):
    """What a block's output is multiplied by before its residual add (Granite's multiplier)."""
    return hp.get("residual_multiplier", 0) or 1.0


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


class Replay:
    """The op of each tap, from the actual trace's own input taps (reference/forward.cpp's order)."""

    def __init__(self, trace, weights, hp, tokens):
        self.f, self.w, self.hp, self.tokens, self.taps = trace, weights, hp, tokens, {}
        # The RoPE frequency factors: Llama 3.1's, or LongRoPE's set for the run's context.
        self.rope_factors = "rope_freqs.weight" if hp["rope_freq_factors"] else None
        if hp.get("rope_scaling", {}).get("type") == "longrope":
            n_ctx = int(trace["dims"].attrs["n_ctx"]) if "dims" in trace else 0
            past = n_ctx > hp["rope_scaling"]["n_ctx_orig"]
            self.rope_factors = "rope_factors_long.weight" if past else "rope_factors_short.weight"

    def tap(self, name, layer, p):
        key = (name, layer)
        if key not in self.taps:
            self.taps[key] = read_tap(self.f, name, layer)
        if p not in self.taps[key]:
            raise ReproError(f"actual.h5 has no {name} (layer {layer}) at position {p}: the op's input")
        return self.taps[key][p]

    def stream_in(self, layer, p):
        return self.tap("resid.ffn", layer - 1, p) if layer > 0 else self.tap("token_embd", -1, p)

    def vector(self, name):
        return self.w.tensor(name).reshape(-1)

    def op(self, name, layer, p):
        hp, b = self.hp, f"blk.{layer}."
        eps, E = hp["rms_eps"], hp["n_embd"]
        if name == "token_embd":
            row = self.w.tensor("token_embd.weight")[self.tokens[p]]
            if hp["embed_scale"]:
                return row * math.sqrt(E)
            return row * hp["embedding_multiplier"] if hp.get("embedding_multiplier", 0) else row
        if name == "attn_norm":
            return rms(self.stream_in(layer, p), self.vector(b + "attn_norm.weight"), eps)
        if name in ("attn_q", "attn_k", "attn_v"):
            y = self.w.matrix(b + name + ".weight") @ self.tap("attn_norm", layer, p)
            return y + self.vector(b + name + ".bias") if hp["qkv_bias"] else y
        if name in ("attn_q_norm", "attn_k_norm"):
            src = "attn_q" if name == "attn_q_norm" else "attn_k"
            heads = self.tap(src, layer, p).reshape(-1, hp["head_dim"])
            w = self.vector(b + name + ".weight")
            return np.concatenate([rms(h, w, eps) for h in heads])
        if name in ("attn_q.rope", "attn_k.rope"):
            q = name == "attn_q.rope"
            src = ("attn_q" if q else "attn_k") + ("_norm" if hp["qk_norm"] else "")
            factors = self.vector(self.rope_factors) if self.rope_factors else None
            return rope(self.tap(src, layer, p), hp["n_head"] if q else hp["n_head_kv"], p, hp, layer, factors)
        if name == "kv.k":
            return self.tap("attn_k.rope", layer, p)
        if name == "kv.v":
            return self.tap("attn_v", layer, p)
        if name in ("attn.probs", "attn.probs.summary", "attn.out"):
            return self.attention(name, layer, p)
        if name == "attn_output":
            return self.w.matrix(b + "attn_output.weight") @ self.tap("attn.out", layer, p)
        if name == "attn_post_norm":
            return rms(self.tap("attn_output", layer, p), self.vector(b + "post_attention_norm.weight"), eps)
        if name == "resid.attn":
            added = self.tap("attn_post_norm" if hp["post_norms"] else "attn_output", layer, p)
            return self.stream_in(layer, p) + residual_factor(hp) * added
        if name == "ffn_norm":
            return rms(self.tap("resid.attn", layer, p), self.vector(b + "ffn_norm.weight"), eps)
        if name in ("ffn_gate", "ffn_up"):
            return self.w.matrix(b + name + ".weight") @ self.tap("ffn_norm", layer, p)
        if name in ("ffn_gate_inp", "ffn.routing", "ffn_gate_exps", "ffn_up_exps", "ffn.act_exps") or (
                name == "ffn_down" and hp.get("n_expert", 0) > 0):
            return self.experts(name, layer, p)
        if name == "ffn.act":
            gate, up = self.tap("ffn_gate", layer, p), self.tap("ffn_up", layer, p)
            return (gelu_tanh(gate) if hp["activation"] == "gelu" else gate / (1 + np.exp(-gate))) * up
        if name == "ffn_down":
            return self.w.matrix(b + "ffn_down.weight") @ self.tap("ffn.act", layer, p)
        if name == "ffn_post_norm":
            return rms(self.tap("ffn_down", layer, p), self.vector(b + "post_ffw_norm.weight"), eps)
        if name == "resid.ffn":
            added = self.tap("ffn_post_norm" if hp["post_norms"] else "ffn_down", layer, p)
            return self.tap("resid.attn", layer, p) + residual_factor(hp) * added
        if name == "output_norm":
            return rms(self.tap("resid.ffn", hp["n_layer"] - 1, p), self.vector("output_norm.weight"), eps)
        if name == "output":
            head = self.w.tensor("token_embd.weight" if hp["tied_output"] else "output.weight")
            logits = head @ self.tap("output_norm", -1, p)
            if hp.get("logit_scale", 0):  # Granite divides its logits
                logits = logits / hp["logit_scale"]
            return softcap(logits, hp["final_softcap"])
        raise ReproError(f"no numpy replay for tap {name}")

    def experts(self, name, layer, p):
        """A mixture of experts: the router's logits, the routing (softmax, the n_expert_used
        largest renormalized), each used expert's rows in ascending expert order, their sum."""
        hp, b = self.hp, f"blk.{layer}."
        k, F, E = hp["n_expert_used"], hp["n_ff"], hp["n_embd"]
        if name == "ffn_gate_inp":
            return self.w.tensor(b + "ffn_gate_inp.weight") @ self.tap("ffn_norm", layer, p)
        if name == "ffn.routing":
            logits = self.tap("ffn_gate_inp", layer, p)
            prob = np.exp(logits - logits.max())
            prob /= prob.sum()
            kept = np.argsort(-prob, kind="stable")[:k]
            out = np.zeros_like(prob)
            out[kept] = prob[kept] / prob[kept].sum()
            return out
        routing = self.tap("ffn.routing", layer, p)
        used = np.sort(np.argsort(-routing, kind="stable")[:k])
        if name in ("ffn_gate_exps", "ffn_up_exps"):
            stacked, x = self.w.tensor(b + name + ".weight"), self.tap("ffn_norm", layer, p)
            return np.concatenate([stacked[e * F:(e + 1) * F] @ x for e in used])
        if name == "ffn.act_exps":
            gate, up = self.tap("ffn_gate_exps", layer, p), self.tap("ffn_up_exps", layer, p)
            return gate / (1 + np.exp(-gate)) * up
        down, act = self.w.tensor(b + "ffn_down_exps.weight"), self.tap("ffn.act_exps", layer, p).reshape(k, F)
        return sum(routing[e] * (down[e * E:(e + 1) * E] @ a) for e, a in zip(used, act))

    def attention(self, name, layer, p):
        hp = self.hp
        H, G, D = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        q = self.tap("attn_q.rope", layer, p).reshape(H, D)
        sliding = hp["sliding_window"] > 0 and layer % hp["swa_period"] < hp["swa_period"] - 1
        first = max(0, p - hp["sliding_window"] + 1) if sliding else 0
        keys = range(first, p + 1)
        K = np.stack([self.tap("kv.k", layer, t).reshape(G, D) for t in keys])
        V = np.stack([self.tap("kv.v", layer, t).reshape(G, D) for t in keys])
        width = len(self.tap("attn.probs", layer, p)) // H if name == "attn.probs" else p + 1
        probs, out = np.zeros((H, width)), np.zeros((H, D))
        scale = hp.get("attention_multiplier", 0) or 1 / math.sqrt(hp.get("attn_scale_dim", D))
        if hp.get("attn_temp_scale", 0):  # Llama 4's temperature (Mistral 3)
            scale *= math.log(math.floor(p / hp["attn_temp_floor"]) + 1) * hp["attn_temp_scale"] + 1
        for h in range(H):
            g = h // (H // G)
            s = softcap(K[:, g] @ q[h] * scale, hp["attn_softcap"])
            e = np.exp(s - s.max())
            probs[h, first:p + 1] = e / e.sum()
            out[h] = probs[h, first:p + 1] @ V[:, g]
        if name == "attn.probs.summary":  # per head: 1 - sum, max, mean key / max(p, 1), sum after p
            return np.stack([1 - probs.sum(1), probs.max(1), probs @ np.arange(width) / max(p, 1),
                             probs[:, p + 1:].sum(1)], axis=1).reshape(-1)
        return probs.reshape(-1) if name == "attn.probs" else out.reshape(-1)


def nmse(expected, actual):
    size = float(np.sum(expected * expected))
    err = float(np.sum((actual - expected) ** 2))
    return err / size if size > 0 else (0.0 if err == 0 else math.inf)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default=str(Path(__file__).resolve().parent))
    ap.add_argument("--actual", help="your kernel's output rows (.npy) instead of the recorded ones")
    args = ap.parse_args(argv)
    d = Path(args.dir)
    try:
        m = json.loads((d / "repro.json").read_text())
        finding, hp = m["finding"], m["hparams"]
        name, layer, tap = finding["name"], finding["layer"], finding["tap"]
        threshold = float(finding["threshold"])
        with h5py.File(d / "actual.h5", "r", locking=False) as f:
            tokens = [int(t) for t in f["tokens"][: f.attrs["committed_tokens"]]]
            if tap == "tokens":
                return check_tokens(f, tokens, m)
            if name.startswith("weight_stats."):
                raise ReproError("a weight recorded as statistics only: compare it with `tapdiff diff`")
            replay = Replay(f, Weights(str(d / "model.gguf"), hp), hp, tokens)
            if name.startswith("weight."):  # a row of the tensor per "position"
                recorded = read_tap(f, name, -1)
                positions = sorted(recorded)
                matrix = replay.w.tensor(name[len("weight."):])
                expected = {p: matrix.reshape(-1, len(recorded[p]))[p] for p in positions}
            else:  # positions after the common token prefix ran on other tokens in the two traces
                recorded = read_tap(f, name, layer)
                positions = [p for p in sorted(recorded) if p < m["compared_positions"]]
                expected = {p: replay.op(name, layer, p) for p in positions}
            if args.actual:
                rows = np.load(args.actual).astype(np.float64)
                rows = rows.reshape(len(positions) if len(rows) == len(positions) else 1, -1)
                recorded = dict(zip(positions, rows)) if len(rows) == len(positions) else {finding["position"]: rows[0]}
                positions = sorted(recorded)
    except (OSError, KeyError, ValueError, ReproError) as e:
        print(f"repro.py: {d}: {e}", file=sys.stderr)
        return 2
    print(f"{tap} ({finding['class']}), actual {m['actual']['producer']} {json.dumps(m['engine'])}")
    print(f"numpy replay from the actual trace's own inputs against the actual output, threshold {threshold:.3g}:")
    bad = []
    for p in positions:
        a, b = expected[p], recorded[p]
        if a.size != b.size:
            print(f"  position {p}: {b.size} values, the op gives {a.size}  FAIL")
            bad.append(p)
            continue
        e = nmse(a, b)
        worst = float(np.max(np.abs(a - b))) if a.size else 0.0
        over = not e <= threshold
        bad += [p] if over else []
        if over or p == finding["position"]:
            print(f"  position {p}: nmse {e:.3g}  max abs {worst:.3g}  {'FAIL' if over else 'ok'}")
    if bad:
        print(f"FAIL: {len(bad)} of {len(positions)} positions diverge from the op (first {bad[0]})")
        return 1
    print(f"PASS: all {len(positions)} positions within {threshold:.3g} of the op")
    return 0


def check_tokens(f, tokens, m):
    """A token-sequence finding: each generated token against the greedy choice of its logits."""
    logits = read_tap(f, "output", -1)
    start = int(f.attrs["prompt_length"])
    for p in range(start, len(tokens)):
        if p - 1 in logits and int(np.argmax(logits[p - 1])) != tokens[p]:
            print(f"FAIL: the token at {p} is {tokens[p]}; the logits at {p - 1} choose {int(np.argmax(logits[p - 1]))}")
            return 1
    print("PASS: every generated token is its logits' greedy choice")
    return 0


if __name__ == "__main__":
    sys.exit(main())
