"""What transformers' GGUF loader leaves out of a model's config, filled from the GGUF as llama.cpp
reads it (model/config.cpp): without it transformers would run another model than the file
describes (docs/cross-engine.md, "What transformers' GGUF loader leaves out")."""

from __future__ import annotations

import math
from typing import Dict

import numpy as np


class InputError(Exception):
    """Bad input: the message names the file and the field (exit code 2)."""


def rope_theta(config) -> float:
    """transformers 5 keeps it in rope_parameters, earlier versions as rope_theta."""
    parameters = getattr(config, "rope_parameters", None) or {}
    parameters = parameters.get("full_attention", parameters)  # gemma3's global layers'
    return float(parameters.get("rope_theta", getattr(config, "rope_theta", 0.0)) or 0.0)


class GgufKeys:
    """The `{arch}.*` metadata of a GGUF, and its small tensors, read without loading the weights."""

    def __init__(self, model_path: str):
        import gguf
        self.path = model_path
        self.reader = gguf.GGUFReader(model_path)
        self.arch = self.reader.fields["general.architecture"].contents()

    def get(self, name, default=None):
        field = self.reader.fields.get(f"{self.arch}.{name}")
        return default if field is None else field.contents()

    def tensor(self, name):
        for t in self.reader.tensors:
            if t.name == name:
                return [float(x) for x in np.asarray(t.data, dtype=np.float32).reshape(-1)]
        return None


def rope_scaling(keys: GgufKeys, config) -> dict:
    """The GGUF's RoPE scaling as transformers' rope parameters, read as llama.cpp reads the keys
    (model/config.cpp); {} for none."""
    if keys.arch == "phi3" and keys.tensor("rope_factors_long.weight") is not None:
        original = int(keys.get("rope.scaling.original_context_length", keys.get("context_length")))
        parameters = {"rope_type": "longrope", "short_factor": keys.tensor("rope_factors_short.weight"),
                      "long_factor": keys.tensor("rope_factors_long.weight"),
                      "original_max_position_embeddings": original}
        if keys.get("rope.scaling.attn_factor") is not None:
            parameters["attention_factor"] = float(keys.get("rope.scaling.attn_factor"))
        config.original_max_position_embeddings = original
        return parameters
    kind = keys.get("rope.scaling.type", "linear")
    factor = keys.get("rope.scaling.factor", keys.get("rope.scale_linear", 0.0))
    if kind == "none" or factor in (0.0, 1.0):
        return {}
    if kind not in ("linear", "yarn"):
        raise InputError(f"{keys.path}: {keys.arch}.rope.scaling.type: expected none, linear or yarn, got {kind}")
    parameters = {"rope_type": kind, "factor": float(factor)}
    if kind == "yarn":
        parameters["original_max_position_embeddings"] = int(keys.get("rope.scaling.original_context_length",
                                                                      keys.get("context_length")))
        for name, hf in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if keys.get(f"rope.scaling.{name}") is not None:
                parameters[hf] = float(keys.get(f"rope.scaling.{name}"))
        # cos and sin's magnitude as llama.cpp computes it (model/config.cpp): attn_factor times
        # get_mscale(f, 1) / get_mscale(f, m), m the log multiplier (HF's mscale_all_dim; Mistral 3).
        attn_factor = keys.get("rope.scaling.attn_factor")
        log_multiplier = keys.get("rope.scaling.yarn_log_multiplier")
        if attn_factor is not None or log_multiplier:
            def get_mscale(m):
                return 0.1 * m * math.log(float(factor)) + 1
            divisor = get_mscale(float(log_multiplier)) if log_multiplier else 1.0
            parameters["attention_factor"] = float(attn_factor if attn_factor is not None else 1.0) * get_mscale(1) / divisor
    return parameters


def complete_config(config, model_path: str) -> Dict[str, str]:
    """What transformers' GGUF loader leaves out of the config, filled from the GGUF as llama.cpp
    reads it: the head width (`attention.key_length`, read for gemma only), Phi's partial rotation
    (`rope.dimension_count`), Gemma 2's soft-caps, the attention scale (gemma's
    query_pre_attn_scalar) and the RoPE scaling
    (transformers reads none for these architectures). Without them transformers runs another model:
    wrong shapes at best, at worst the same shapes rotated or scaled otherwise. Returns what it set,
    for the trace's settings."""
    keys = GgufKeys(model_path)
    filled = {}

    def put(name, value):
        if getattr(config, name, None) != value:
            setattr(config, name, value)
            filled[name] = value

    head_dim = int(keys.get("attention.key_length", config.hidden_size // config.num_attention_heads))
    put("head_dim", head_dim)
    if config.model_type.startswith("gemma"):
        # llama.cpp's rule (model/config.hpp, attn_scale_dim): n_embd / n_head for the 27B models,
        # known by their layer counts; head_dim for the others.
        gemma_27b = config.num_hidden_layers == (46 if config.model_type == "gemma2" else 62)
        put("query_pre_attn_scalar", config.hidden_size // config.num_attention_heads if gemma_27b else head_dim)
    if config.model_type == "qwen3_moe":
        put("moe_intermediate_size", int(keys.get("expert_feed_forward_length", config.intermediate_size)))
    if config.model_type == "gemma2":
        put("attn_logit_softcapping", float(keys.get("attn_logit_softcapping", 50.0)))
        put("final_logit_softcapping", float(keys.get("final_logit_softcapping", 30.0)))
    parameters = getattr(config, "rope_parameters", None)
    if parameters is None:
        import transformers
        raise InputError(f"{model_path}: transformers {transformers.__version__} keeps no "
                         "rope_parameters in its config; this producer is written for transformers 5")
    # Which layers slide, and at what base they rotate, where the GGUF says (model/config.cpp).
    pattern = keys.get("attention.sliding_window_pattern")
    if pattern is not None and getattr(config, "layer_types", None) is not None:
        sliding = ([bool(s) for s in pattern] if isinstance(pattern, list)
                   else [layer % pattern < pattern - 1 for layer in range(config.num_hidden_layers)])
        put("layer_types", ["sliding_attention" if s else "full_attention" for s in sliding])
    swa_base = keys.get("rope.freq_base_swa")
    if swa_base is not None and "sliding_attention" in parameters:
        parameters["sliding_attention"]["rope_theta"] = float(swa_base)
        filled["rope_theta_sliding"] = float(swa_base)
    elif swa_base is not None and float(swa_base) != rope_theta(config):
        raise InputError(f"{model_path}: {keys.arch}.rope.freq_base_swa: transformers' {config.model_type} rotates "
                         f"every layer at one base ({rope_theta(config):g}), this model its sliding ones at {swa_base:g}")
    # Gemma 3 keeps one set per layer type; the scaling is the global layers' (model/config.cpp).
    rope = parameters.get("full_attention", parameters)
    rotated = int(keys.get("rope.dimension_count", head_dim))
    if rotated != head_dim:
        rope["partial_rotary_factor"] = rotated / head_dim
        filled["partial_rotary_factor"] = rotated / head_dim
    scaling = rope_scaling(keys, config)
    if scaling:
        rope.update(scaling)
        filled["rope_scaling"] = scaling["rope_type"]
    return {name: str(value) for name, value in filled.items()}
