"""Hugging Face transformers as a tapdiff producer: the GGUF loaded with transformers
(`gguf_file=`, dequantized to float32, eager attention), every catalogue tap recorded from the
model's own modules, and the trace written with tapdiff_trace.py.

    python -m tapdiff_transformers -m model.gguf --tokens 1,403,407 -n 16 -o hf.h5 [--logits all]

`tapdiff run --backend transformers` runs this module with build/venv's Python.

Where each tap comes from (docs/taps.md, "transformers"): module outputs through forward
hooks (q_proj, k_proj, v_proj, o_proj, the norms, gate_proj, up_proj, down_proj, lm_head), module
inputs through pre-hooks (o_proj's input is attn.out, down_proj's ffn.act,
post_attention_layernorm's resid.attn), the rotary application by wrapping the modeling
module's apply_rotary_pos_emb, attn.probs from the eager attention's weights, and kv.k / kv.v
read back from the cache after each step. transformers un-permutes llama's Q and K weights when
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

from tapdiff_trace import TraceWriter

ARCHS = ("llama", "qwen2")  # model types whose module layout this producer knows


class InputError(Exception):
    """Bad input: the message names the file and the field (exit code 2)."""


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
        self.permute_qk = self.model_type == "llama"
        self.step: Dict[Tuple[str, int], np.ndarray] = {}
        self.layer = -1  # the decoder layer running, for the rotary wrapper
        self.handles = []
        inner = model.model
        self.hook_output(inner.embed_tokens, "token_embd", -1)
        for layer, block in enumerate(inner.layers):
            attn, mlp = block.self_attn, block.mlp
            self.handles.append(attn.register_forward_pre_hook(self.entering(layer)))
            self.hook_output(block.input_layernorm, "attn_norm", layer)
            self.hook_output(attn.q_proj, "attn_q", layer)
            self.hook_output(attn.k_proj, "attn_k", layer)
            self.hook_output(attn.v_proj, "attn_v", layer)
            self.handles.append(attn.register_forward_hook(self.attention_weights(layer)))
            self.hook_input(attn.o_proj, "attn.out", layer)
            self.hook_output(attn.o_proj, "attn_output", layer)
            self.hook_input(block.post_attention_layernorm, "resid.attn", layer)
            self.hook_output(block.post_attention_layernorm, "ffn_norm", layer)
            self.hook_output(mlp.gate_proj, "ffn_gate", layer)
            self.hook_output(mlp.up_proj, "ffn_up", layer)
            self.hook_input(mlp.down_proj, "ffn.act", layer)
            self.hook_output(mlp.down_proj, "ffn_down", layer)
            self.hook_output(block, "resid.ffn", layer)
        self.hook_output(inner.norm, "output_norm", -1)
        self.hook_output(model.lm_head, "output", -1)
        # The rotary application is a function, not a module: wrap the modeling module's.
        self.modeling = importlib.import_module(type(model).__module__)
        self.apply_rotary = self.modeling.apply_rotary_pos_emb
        self.modeling.apply_rotary_pos_emb = self.rotary

    def close(self):
        for h in self.handles:
            h.remove()
        self.modeling.apply_rotary_pos_emb = self.apply_rotary

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

    def record(self, cache, first: int, n: int):
        """Writes the step's taps (positions first .. first + n - 1) and the cache rows it wrote."""
        for layer, cached in enumerate(cache.layers):
            for name, t in (("kv.k", cached.keys), ("kv.v", cached.values)):
                self.keep(name, layer, self.rows(t[:, :, first:first + n].transpose(1, 2)))
        for (name, layer), rows in self.step.items():
            if name == "output" and not self.logits_all and rows.shape[0] > 1:
                self.trace.record(name, layer, first + n - 1, rows[-1:])
            else:
                self.trace.record(name, layer, first, rows)
        self.step.clear()


def rope_theta(config) -> float:
    """transformers 5 keeps it in rope_parameters, earlier versions as rope_theta."""
    parameters = getattr(config, "rope_parameters", None) or {}
    return float(parameters.get("rope_theta", getattr(config, "rope_theta", 0.0)) or 0.0)


def set_rope_scaling(config, model_path: str) -> None:
    """transformers' GGUF loader reads no rope.scaling.* key for llama or qwen2 (only gpt-oss's):
    the GGUF's linear or YaRN scaling goes into the config here, or the run would rotate as if the
    model had none. The keys are read as llama.cpp reads them (model/config.cpp)."""
    import gguf
    reader = gguf.GGUFReader(model_path)
    arch = reader.fields["general.architecture"].contents()

    def key(name, default=None):
        field = reader.fields.get(f"{arch}.{name}")
        return default if field is None else field.contents()

    kind = key("rope.scaling.type", "linear")
    factor = key("rope.scaling.factor", key("rope.scale_linear", 0.0))
    if kind == "none" or factor in (0.0, 1.0):
        return
    if kind not in ("linear", "yarn"):
        raise InputError(f"{model_path}: {arch}.rope.scaling.type: expected none, linear or yarn, got {kind}")
    parameters = {"rope_type": kind, "factor": float(factor)}
    if kind == "yarn":
        parameters["original_max_position_embeddings"] = int(key("rope.scaling.original_context_length",
                                                                 key("context_length")))
        for name, hf in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if key(f"rope.scaling.{name}") is not None:
                parameters[hf] = float(key(f"rope.scaling.{name}"))
    if hasattr(config, "rope_parameters"):  # transformers 5
        config.rope_parameters = {**(config.rope_parameters or {}), **parameters}
    else:
        config.rope_scaling = parameters


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
    if config.model_type not in ARCHS:
        raise InputError(f"{model_path}: general.architecture: transformers loads it as {config.model_type}; "
                         f"this producer records {', '.join(ARCHS)}")
    set_rope_scaling(config, model_path)
    try:
        # llama2.c's exports store "no padding token" as (uint32) -1, which nn.Embedding
        # refuses; the padding index only matters to training.
        if config.pad_token_id is not None and not 0 <= config.pad_token_id < config.vocab_size:
            notes["pad_token_id"] = f"{config.pad_token_id} (outside the vocabulary) dropped"
            config.pad_token_id = None
        model, loading = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, config=config,
                                                              dtype=torch.float32, attn_implementation="eager",
                                                              output_loading_info=True)
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
                else "as loaded (GGUF order)", **notes}
    out = list(tokens)
    with TraceWriter(output, producer="transformers", producer_version=f"transformers {transformers.__version__}",
                     model_path=model_path, model_sha256=sha256_of(model_path),
                     hparams={"arch": c.model_type, "n_layer": c.num_hidden_layers,
                              "rope_freq_base": rope_theta(c),
                              "rms_eps": float(c.rms_norm_eps)},
                     precision="f32", prompt_length=len(tokens), tokens=tokens, dims=dims,
                     settings=settings) as trace:
        recorder = Recorder(model, trace, n_ctx, logits_all)
        try:
            cache = transformers.DynamicCache(config=c)
            feed, first = list(tokens), 0
            with torch.no_grad():
                while True:
                    result = model(input_ids=torch.tensor([feed]), cache=cache, use_cache=True,
                                   position_ids=torch.arange(first, first + len(feed)).unsqueeze(0))
                    recorder.record(cache, first, len(feed))
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
