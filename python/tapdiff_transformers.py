"""Hugging Face transformers as a tapdiff producer: the GGUF loaded with transformers
(`gguf_file=`, dequantized to float32, eager attention), every catalogue tap recorded from the
model's own modules, and the trace written with tapdiff_trace.py.

    python -m tapdiff_transformers -m model.gguf --tokens 1,403,407 -n 16 -o hf.h5 [--logits all]

`tapdiff run --backend transformers` runs this module with build/venv's Python.

Where each tap comes from (docs/taps.md, "transformers"): module outputs through forward
hooks (q_proj, k_proj, v_proj or phi3's qkv_proj split, q_norm, k_norm, o_proj, the norms,
gate_proj, up_proj or phi3's gate_up_proj split, down_proj), module inputs through pre-hooks
(o_proj's input is attn.out, down_proj's ffn.act, the FFN's norm's resid.attn), the rotary
application by wrapping the modeling module's apply_rotary_pos_emb, attn.probs from the eager
attention's weights, kv.k / kv.v read back from the cache after each step, qwen3moe's router
and its experts' own products (hook_experts), and the logits the model returns (gemma's
soft-capped ones). transformers un-permutes llama's Q and K weights when
it loads a GGUF (its rotary pairs dimension i with i + head_dim/2; llama.cpp's with 2i + 1), so
for llama the Q and K taps are permuted back into the catalogue's (GGUF) order, and the trace
says so in /producer_settings.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import sys
from typing import Dict, List, Tuple

import numpy as np

from tapdiff_hf_config import InputError, complete_config, rope_theta
from tapdiff_trace import TraceWriter

# GGUF architecture -> the model type transformers loads it as, for those whose modules this
# producer knows.
ARCHS = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3", "gemma2": "gemma2",
         "gemma3": "gemma3_text", "qwen3moe": "qwen3_moe"}


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def gguf_order(x: np.ndarray, head_dim: int) -> np.ndarray:
    """(rows, heads * head_dim) from transformers' half-split head layout into GGUF's interleaved one."""
    rows = x.shape[0]
    return x.reshape(rows, -1, 2, head_dim // 2).transpose(0, 1, 3, 2).reshape(rows, -1)


class Recorder:
    """Hooks on one model; collects a forward step's taps, then writes them in catalogue order."""

    def __init__(self, model, trace: TraceWriter, n_ctx: int, logits_all: bool):
        import torch
        self.torch = torch
        self.trace = trace
        self.n_ctx = n_ctx
        self.logits_all = logits_all
        config = model.config
        self.model_type = config.model_type
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        q_width, kv_width = config.num_attention_heads * self.head_dim, config.num_key_value_heads * self.head_dim
        self.permute_qk = self.model_type == "llama"
        self.step: Dict[Tuple[str, int], np.ndarray] = {}
        self.linear = None          # torch's linear, while the experts' products are recorded
        self.expert_calls = None    # the running experts module's (input, output) of each product
        self.expert_choice = None   # ... and the experts each token was routed to
        self.layer = -1  # the decoder layer running, for the rotary wrapper
        self.handles = []
        inner = model.model
        self.hook_output(inner.embed_tokens, "token_embd", -1)
        for layer, block in enumerate(inner.layers):
            attn, mlp = block.self_attn, block.mlp
            self.handles.append(attn.register_forward_pre_hook(self.entering(layer)))
            self.hook_output(block.input_layernorm, "attn_norm", layer)
            if hasattr(attn, "qkv_proj"):  # phi3
                self.hook_split(attn.qkv_proj, {"attn_q": q_width, "attn_k": kv_width, "attn_v": kv_width}, layer)
            else:
                self.hook_output(attn.q_proj, "attn_q", layer)
                self.hook_output(attn.k_proj, "attn_k", layer)
                self.hook_output(attn.v_proj, "attn_v", layer)
            if hasattr(attn, "q_norm"):  # qwen3 on (1, n, heads, head_dim), gemma3 on (1, heads, n, head_dim)
                heads_first = self.model_type == "gemma3_text"
                self.hook_heads(attn.q_norm, "attn_q_norm", layer, heads_first)
                self.hook_heads(attn.k_norm, "attn_k_norm", layer, heads_first)
            self.handles.append(attn.register_forward_hook(self.attention_weights(layer)))
            self.hook_input(attn.o_proj, "attn.out", layer)
            self.hook_output(attn.o_proj, "attn_output", layer)
            if hasattr(block, "pre_feedforward_layernorm"):  # gemma: a norm on each block's output too
                self.hook_output(block.post_attention_layernorm, "attn_post_norm", layer)
                ffn_norm = block.pre_feedforward_layernorm
                self.hook_output(block.post_feedforward_layernorm, "ffn_post_norm", layer)
            else:
                ffn_norm = block.post_attention_layernorm
            self.hook_input(ffn_norm, "resid.attn", layer)
            self.hook_output(ffn_norm, "ffn_norm", layer)
            if hasattr(mlp, "experts"):  # qwen3moe
                self.hook_experts(mlp, layer)
            else:
                if hasattr(mlp, "gate_up_proj"):  # phi3
                    self.hook_split(mlp.gate_up_proj, {"ffn_gate": config.intermediate_size,
                                                       "ffn_up": config.intermediate_size}, layer)
                else:
                    self.hook_output(mlp.gate_proj, "ffn_gate", layer)
                    self.hook_output(mlp.up_proj, "ffn_up", layer)
                self.hook_input(mlp.down_proj, "ffn.act", layer)
                self.hook_output(mlp.down_proj, "ffn_down", layer)
            self.hook_output(block, "resid.ffn", layer)
        self.hook_output(inner.norm, "output_norm", -1)
        # The rotary application is a function, not a module: wrap the modeling module's.
        self.modeling = importlib.import_module(type(model).__module__)
        self.apply_rotary = self.modeling.apply_rotary_pos_emb
        self.modeling.apply_rotary_pos_emb = self.rotary

    def close(self):
        for h in self.handles:
            h.remove()
        self.modeling.apply_rotary_pos_emb = self.apply_rotary
        if self.linear is not None:
            self.torch.nn.functional.linear = self.linear

    def rows(self, t) -> np.ndarray:
        """(1, n, ...) -> (n, width) float32."""
        a = t.detach().to(self.torch.float32).cpu().numpy()
        return a.reshape(a.shape[1], -1) if a.ndim >= 2 else a.reshape(1, -1)

    def keep(self, name: str, layer: int, rows: np.ndarray):
        if self.permute_qk and name in ("attn_q", "attn_k", "attn_q.rope", "attn_k.rope", "kv.k"):
            rows = gguf_order(rows, self.head_dim)
        self.step[(name, layer)] = rows

    def hook_output(self, module, name, layer):
        def hook(_module, _inputs, output):
            self.keep(name, layer, self.rows(output[0] if isinstance(output, tuple) else output))
        self.handles.append(module.register_forward_hook(hook))

    def hook_experts(self, mlp, layer):
        """transformers keeps a layer's experts in one module whose forward multiplies each used
        expert's rows with plain functional linears, which no module hook sees: those products are
        recorded while the module runs (torch's linear wrapped) and put in the catalogue's rows, in
        the module's own order: the used experts ascending, a gate_up then a down product each (a
        product belongs to the expert whose turn it is, whatever matrix it multiplies), on the
        tokens routed to that expert in the module's order (slot, then token), or on that same set
        in whatever order the product's input rows hold them."""
        torch = self.torch
        if self.linear is None:
            self.linear = torch.nn.functional.linear

            def linear(x, weight, *args, **kwargs):
                y = self.linear(x, weight, *args, **kwargs)
                if self.expert_calls is not None:
                    self.expert_calls.append((x, y))
                return y
            torch.nn.functional.linear = linear

        def router(_module, _inputs, output):
            logits, scores, chosen = output
            self.step[("ffn_gate_inp", layer)] = logits.detach().float().numpy()
            dense = torch.zeros_like(logits).scatter(1, chosen, scores.to(logits.dtype))
            self.step[("ffn.routing", layer)] = dense.detach().float().numpy()

        def entering(_module, inputs):
            self.expert_calls, self.expert_choice = [], inputs[1]

        def leaving(module, inputs, _output):
            calls, chosen, hidden = self.expert_calls, self.expert_choice, inputs[0]
            self.expert_calls = None
            n, k, n_ff = chosen.shape[0], chosen.shape[1], module.intermediate_dim
            used = sorted(set(chosen.flatten().tolist()))
            if len(calls) != 2 * len(used):
                raise RuntimeError(f"layer {layer}: the experts module made {len(calls)} products for "
                                   f"{len(used)} experts; this producer expects two each")
            rows = {name: np.zeros((n, k, n_ff), dtype=np.float32)
                    for name in ("ffn_gate_exps", "ffn_up_exps", "ffn.act_exps")}
            order = torch.sort(chosen, dim=1).values  # slot j of a token: its j-th smallest expert
            for i, e in enumerate(used):
                (x, gate_up), (act, _) = calls[2 * i], calls[2 * i + 1]
                _, tokens = torch.where(chosen.T == e)  # the module's order: slot, then token
                if x.shape[0] != len(tokens) or act.shape[0] != len(tokens):
                    raise RuntimeError(f"layer {layer}: the experts module's products {2 * i} and {2 * i + 1} hold "
                                       f"{x.shape[0]} and {act.shape[0]} rows for expert {e}, routed {len(tokens)} "
                                       "tokens; this producer expects the used experts in ascending order")
                gate, up = gate_up.detach().float().chunk(2, dim=-1)
                act = act.detach().float()
                for r, t in enumerate(self.follow_rows(x, hidden, tokens)):
                    slot = int((order[t] == e).nonzero()[0, 0])
                    rows["ffn_gate_exps"][t, slot] = gate[r].numpy()
                    rows["ffn_up_exps"][t, slot] = up[r].numpy()
                    rows["ffn.act_exps"][t, slot] = act[r].numpy()
            for name, value in rows.items():
                self.step[(name, layer)] = value

        self.handles.append(mlp.gate.register_forward_hook(router))
        self.handles.append(mlp.experts.register_forward_pre_hook(entering))
        self.handles.append(mlp.experts.register_forward_hook(leaving))
        self.hook_output(mlp, "ffn_down", layer)

    def follow_rows(self, x, hidden, tokens):
        """`tokens` as the rows of x hold them, where x holds exactly their inputs in another order;
        otherwise as given (x is then not their inputs at all: what the module computed for them)."""
        torch = self.torch
        if torch.equal(x, hidden[tokens]):
            return tokens.tolist()
        same = (x[:, None, :] == hidden[tokens][None, :, :]).all(dim=-1)  # (rows of x, tokens)
        followed, taken = [], set()
        for r in range(x.shape[0]):
            free = [j for j in same[r].nonzero()[:, 0].tolist() if j not in taken]
            if not free:
                return tokens.tolist()
            taken.add(free[0])
            followed.append(int(tokens[free[0]]))
        return followed

    def hook_heads(self, module, name, layer, heads_first: bool):
        def hook(_module, _inputs, output):
            self.keep(name, layer, self.rows(output.transpose(1, 2) if heads_first else output))
        self.handles.append(module.register_forward_hook(hook))

    def hook_split(self, module, widths: Dict[str, int], layer):
        """One fused projection's output, split into the taps its parts are (in GGUF's order)."""
        def hook(_module, _inputs, output):
            rows, at = self.rows(output), 0
            for name, width in widths.items():
                self.keep(name, layer, rows[:, at:at + width])
                at += width
        self.handles.append(module.register_forward_hook(hook))

    def hook_input(self, module, name, layer):
        def hook(_module, inputs):
            self.keep(name, layer, self.rows(inputs[0]))
        self.handles.append(module.register_forward_pre_hook(hook))

    def entering(self, layer):
        def hook(_module, _inputs):
            self.layer = layer
        return hook

    def rotary(self, q, k, cos, sin, *args, **kwargs):
        q_rot, k_rot = self.apply_rotary(q, k, cos, sin, *args, **kwargs)
        for name, t in (("attn_q.rope", q_rot), ("attn_k.rope", k_rot)):
            # (1, heads, n, head_dim) -> (n, heads * head_dim)
            self.keep(name, self.layer, self.rows(t.transpose(1, 2)))
        return q_rot, k_rot

    def attention_weights(self, layer):
        def hook(_module, _inputs, output):
            weights = output[1]
            if weights is None:
                return
            w = weights.detach().to(self.torch.float32).cpu().numpy()[0]  # (heads, n, keys)
            rows = np.zeros((w.shape[1], w.shape[0], self.n_ctx), dtype=np.float32)
            keys = min(w.shape[2], self.n_ctx)
            rows[:, :, :keys] = w.transpose(1, 0, 2)[:, :, :keys]
            self.step[("attn.probs", layer)] = rows
        return hook

    def record(self, cache, logits, first: int, n: int):
        """Writes the step's taps (positions first .. first + n - 1), the cache rows it wrote and the
        logits the model returned (after gemma's soft-capping, which its lm_head does not apply)."""
        self.keep("output", -1, self.rows(logits))
        for layer, cached in enumerate(cache.layers):
            for name, t in (("kv.k", cached.keys), ("kv.v", cached.values)):
                self.keep(name, layer, self.rows(t[:, :, first:first + n].transpose(1, 2)))
        for (name, layer), rows in self.step.items():
            if name == "output" and not self.logits_all and rows.shape[0] > 1:
                self.trace.record(name, layer, first + n - 1, rows[-1:])
            else:
                self.trace.record(name, layer, first, rows)
        self.step.clear()


def load(model_path: str):
    os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF conversion bar, on every run
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
        transformers.logging.disable_progress_bar()
    except ImportError as e:
        raise InputError(f"transformers: not installed in {sys.executable} ({e}); scripts/bootstrap.sh installs it "
                         "from scripts/requirements-transformers.txt") from e
    if not os.path.isfile(model_path):
        raise InputError(f"{model_path}: model: no such file")
    where, name = os.path.dirname(os.path.abspath(model_path)), os.path.basename(model_path)
    notes = {}
    try:
        config = transformers.AutoConfig.from_pretrained(where, gguf_file=name)
    except Exception as e:  # transformers raises many kinds for a GGUF it cannot read
        raise InputError(f"{model_path}: transformers could not load the model: {e}") from e
    # Before the weights: transformers' loader fails on other layouts with messages about sizes.
    if config.model_type not in ARCHS.values():
        raise InputError(f"{model_path}: general.architecture: transformers loads it as {config.model_type}; "
                         f"this producer records {', '.join(ARCHS)}")
    notes.update(complete_config(config, model_path))
    try:
        # llama2.c's exports store "no padding token" as (uint32) -1, which nn.Embedding
        # refuses; the padding index only matters to training.
        if config.pad_token_id is not None and not 0 <= config.pad_token_id < config.vocab_size:
            notes["pad_token_id"] = f"{config.pad_token_id} (outside the vocabulary) dropped"
            config.pad_token_id = None
        # The experts too run eagerly, their own loop over the used experts (hook_experts records it).
        eager = {"experts_implementation": "eager"} if hasattr(config, "num_experts") else {}
        model, loading = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, config=config,
                                                              dtype=torch.float32, attn_implementation="eager",
                                                              output_loading_info=True, **eager)
    except Exception as e:  # transformers raises many kinds for a GGUF it cannot read
        raise InputError(f"{model_path}: transformers could not load the model: {e}") from e
    # A parameter the GGUF does not fill is initialized at random: a run of another model. (A llama
    # GGUF with experts, Mixtral's layout, loads as a dense llama without its FFN weights.)
    if loading.get("missing_keys"):
        missing = sorted(loading["missing_keys"])
        raise InputError(f"{model_path}: transformers found no weights for {len(missing)} of the {config.model_type} "
                         f"model's parameters ({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): "
                         "it would run them initialized at random")
    return model.eval(), notes


def run(model_path: str, tokens: List[int], n_predict: int, output: str, logits_all: bool) -> List[int]:
    model, notes = load(model_path)  # first: it says what is missing when torch or transformers is
    import torch
    import transformers
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if any(t < 0 or t >= c.vocab_size for t in tokens):
        raise InputError(f"--tokens: expected ids in 0..{c.vocab_size - 1} ({model_path} has {c.vocab_size} tokens)")
    n_ctx = len(tokens) + n_predict
    dims = {"n_layer": c.num_hidden_layers, "n_embd": c.hidden_size, "n_head": c.num_attention_heads,
            "n_head_kv": c.num_key_value_heads, "head_dim": head_dim, "n_ff": c.intermediate_size,
            "n_vocab": c.vocab_size, "n_ctx": n_ctx}
    settings = {"torch": torch.__version__, "dtype": "float32", "attn_implementation": "eager",
                "qk_layout": "permuted from transformers' half-split heads to GGUF order" if c.model_type == "llama"
                else "as loaded (GGUF order)", **{f"config.{k}" if k != "pad_token_id" else k: v
                                                   for k, v in notes.items()}}
    out = list(tokens)
    with TraceWriter(output, producer="transformers", producer_version=f"transformers {transformers.__version__}",
                     model_path=model_path, model_sha256=sha256_of(model_path),
                     hparams={"arch": next(a for a, t in ARCHS.items() if t == c.model_type),
                              "n_layer": c.num_hidden_layers,
                              "rope_freq_base": rope_theta(c),
                              "rms_eps": float(c.rms_norm_eps)},
                     precision="f32", prompt_length=len(tokens), tokens=tokens, dims=dims,
                     settings=settings) as trace:
        recorder = Recorder(model, trace, n_ctx, logits_all)
        try:
            # Full layers only: a sliding layer's cache drops the rows past its window, whose kv.k
            # and kv.v the trace holds too. The window is the attention mask's, made from the config.
            cache = transformers.DynamicCache()
            feed, first = list(tokens), 0
            with torch.no_grad():
                while True:
                    result = model(input_ids=torch.tensor([feed]), cache=cache, use_cache=True,
                                   position_ids=torch.arange(first, first + len(feed)).unsqueeze(0))
                    recorder.record(cache, result.logits, first, len(feed))
                    first += len(feed)
                    if len(out) < n_ctx:
                        out.append(int(result.logits[0, -1].argmax()))
                        trace.append_tokens([out[-1]])
                    trace.end_step()
                    if len(out) == n_ctx:
                        break
                    feed = [out[-1]]
        finally:
            recorder.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tapdiff_transformers", description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model")
    ap.add_argument("--tokens", required=True, help="prompt token ids, e.g. 1,403,407")
    ap.add_argument("-n", "--n-predict", type=int, default=16)
    ap.add_argument("-o", "--output", required=True, help="trace to write (.h5)")
    ap.add_argument("--logits", choices=("last", "all"), default="last")
    args = ap.parse_args(argv)
    try:
        try:
            tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
        except ValueError:
            raise InputError(f"--tokens: expected comma-separated token ids, got {args.tokens!r}")
        if not tokens:
            raise InputError("--tokens: expected at least one prompt token")
        if args.n_predict < 0:
            raise InputError(f"--n-predict: expected >= 0, got {args.n_predict}")
        out = run(args.model, tokens, args.n_predict, args.output, args.logits == "all")
    except InputError as e:
        print(f"tapdiff_transformers: error: {e}", file=sys.stderr)
        return 2
    print("tokens: " + ",".join(map(str, out)))
    print(f"trace: {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
