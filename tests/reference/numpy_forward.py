"""An independent llama/qwen2 forward pass in numpy (a mixture of experts too), for tests only.

Written from the model definition (HF LlamaForCausalLM / Qwen2ForCausalLM as llama.cpp lays
their weights out in GGUF), not translated from reference/. It reads the GGUF with the PyPI
`gguf` package and dequantizes with `gguf.quants`, so no tapdiff code is involved. It computes
in float64 and returns every tap by name, keyed like the trace catalogue.
"""
import numpy as np
import gguf


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode()
    return v.item() if v.size == 1 else v


class Model:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        arch = _field(r, "general.architecture")
        self.arch = arch
        self.n_layer = int(_field(r, f"{arch}.block_count"))
        self.n_embd = int(_field(r, f"{arch}.embedding_length"))
        self.n_head = int(_field(r, f"{arch}.attention.head_count"))
        self.n_head_kv = int(_field(r, f"{arch}.attention.head_count_kv", self.n_head))
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = int(_field(r, f"{arch}.rope.dimension_count", self.head_dim))
        self.base = float(_field(r, f"{arch}.rope.freq_base", 10000.0))
        self.eps = float(_field(r, f"{arch}.attention.layer_norm_rms_epsilon"))
        # llama GGUFs store Q/K rows permuted so that RoPE pairs adjacent dims; qwen2 keeps
        # HF's rotate_half (first half with second half).
        self.neox = arch == "qwen2"
        # A mixture of experts (a llama GGUF that counts experts: Mixtral).
        self.n_expert = int(_field(r, f"{arch}.expert_count", 0))
        self.n_expert_used = int(_field(r, f"{arch}.expert_used_count", 0))
        self.w = {}
        for t in r.tensors:
            # numpy order (reversed ne): [out, in] for matrices
            self.w[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        self.n_vocab = self.w["token_embd.weight"].shape[0]

    def rms(self, x, w):
        return x / np.sqrt(np.mean(x * x) + self.eps) * w

    def rope(self, x, pos):
        # x: [heads, head_dim]; rotate the first n_rot dims by θ_i = pos·base^(-2i/n_rot)
        x = x.copy()
        half = self.n_rot // 2
        theta = pos * self.base ** (-2.0 * np.arange(half) / self.n_rot)
        c, s = np.cos(theta), np.sin(theta)
        if self.neox:
            a, b = x[:, :half].copy(), x[:, half:self.n_rot].copy()
            x[:, :half], x[:, half:self.n_rot] = a * c - b * s, a * s + b * c
        else:
            a, b = x[:, 0:self.n_rot:2].copy(), x[:, 1:self.n_rot:2].copy()
            x[:, 0:self.n_rot:2], x[:, 1:self.n_rot:2] = a * c - b * s, a * s + b * c
        return x

    def experts(self, b, l, p, h, taps):
        """Mixtral's sparse MoE block: softmax over the router's logits, the top experts'
        weights renormalized, their SwiGLU FFNs summed with those weights."""
        logits = self.w[b + "ffn_gate_inp.weight"] @ h
        prob = np.exp(logits - logits.max())
        prob /= prob.sum()
        chosen = np.sort(np.argsort(-prob, kind="stable")[:self.n_expert_used])
        routing = np.zeros_like(prob)
        routing[chosen] = prob[chosen] / prob[chosen].sum()
        taps[("ffn_gate_inp", l, p)], taps[("ffn.routing", l, p)] = logits, routing
        # Stacked [n_expert, out, in] (gguf-py reverses ne).
        gate = np.stack([self.w[b + "ffn_gate_exps.weight"][e] @ h for e in chosen])
        up = np.stack([self.w[b + "ffn_up_exps.weight"][e] @ h for e in chosen])
        act = gate / (1.0 + np.exp(-gate)) * up
        taps[("ffn_gate_exps", l, p)], taps[("ffn_up_exps", l, p)] = gate.ravel(), up.ravel()
        taps[("ffn.act_exps", l, p)] = act.ravel()
        return sum(routing[e] * (self.w[b + "ffn_down_exps.weight"][e] @ a) for e, a in zip(chosen, act))

    def run(self, tokens, n_ctx):
        """Feeds tokens at positions 0..len-1 with room for n_ctx positions; returns
        {(name, layer, pos): array}, attn.probs rows as [n_head, n_ctx] flattened."""
        taps = {}
        H, KVH, D = self.n_head, self.n_head_kv, self.head_dim
        K = np.zeros((self.n_layer, n_ctx, KVH, D))
        V = np.zeros((self.n_layer, n_ctx, KVH, D))
        lm_head = self.w.get("output.weight", self.w["token_embd.weight"])
        for p, tok in enumerate(tokens):
            x = self.w["token_embd.weight"][tok].copy()
            taps[("token_embd", -1, p)] = x.copy()
            for l in range(self.n_layer):
                b = f"blk.{l}."
                h = self.rms(x, self.w[b + "attn_norm.weight"])
                taps[("attn_norm", l, p)] = h
                q = self.w[b + "attn_q.weight"] @ h
                k = self.w[b + "attn_k.weight"] @ h
                v = self.w[b + "attn_v.weight"] @ h
                if b + "attn_q.bias" in self.w:
                    q = q + self.w[b + "attn_q.bias"]
                    k = k + self.w[b + "attn_k.bias"]
                    v = v + self.w[b + "attn_v.bias"]
                taps[("attn_q", l, p)], taps[("attn_k", l, p)], taps[("attn_v", l, p)] = q, k, v
                q = self.rope(q.reshape(H, D), p)
                k = self.rope(k.reshape(KVH, D), p)
                taps[("attn_q.rope", l, p)], taps[("attn_k.rope", l, p)] = q.ravel(), k.ravel()
                K[l, p], V[l, p] = k, v.reshape(KVH, D)
                taps[("kv.k", l, p)], taps[("kv.v", l, p)] = K[l, p].ravel(), V[l, p].ravel()
                probs = np.zeros((H, n_ctx))
                out = np.zeros((H, D))
                for head in range(H):
                    g = head // (H // KVH)
                    s = K[l, : p + 1, g] @ q[head] / np.sqrt(D)
                    e = np.exp(s - s.max())
                    probs[head, : p + 1] = e / e.sum()
                    out[head] = probs[head, : p + 1] @ V[l, : p + 1, g]
                taps[("attn.probs", l, p)] = probs.ravel()
                # Per head: 1 - sum, max, mean key / max(p, 1), sum after p (docs/taps.md).
                keys = np.arange(n_ctx)
                taps[("attn.probs.summary", l, p)] = np.stack(
                    [1 - probs.sum(1), probs.max(1), (probs * keys).sum(1) / max(p, 1), probs[:, p + 1:].sum(1)],
                    axis=1).ravel()
                taps[("attn.out", l, p)] = out.ravel()
                o = self.w[b + "attn_output.weight"] @ out.ravel()
                taps[("attn_output", l, p)] = o
                x = x + o
                taps[("resid.attn", l, p)] = x.copy()
                h = self.rms(x, self.w[b + "ffn_norm.weight"])
                taps[("ffn_norm", l, p)] = h
                if self.n_expert:
                    d = self.experts(b, l, p, h, taps)
                else:
                    gate = self.w[b + "ffn_gate.weight"] @ h
                    up = self.w[b + "ffn_up.weight"] @ h
                    taps[("ffn_gate", l, p)], taps[("ffn_up", l, p)] = gate, up
                    act = gate / (1.0 + np.exp(-gate)) * up
                    taps[("ffn.act", l, p)] = act
                    d = self.w[b + "ffn_down.weight"] @ act
                taps[("ffn_down", l, p)] = d
                x = x + d
                taps[("resid.ffn", l, p)] = x.copy()
            h = self.rms(x, self.w["output_norm.weight"])
            taps[("output_norm", -1, p)] = h
            taps[("output", -1, p)] = lm_head @ h
        return taps
