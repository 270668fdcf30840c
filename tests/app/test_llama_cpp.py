"""tapdiff run --backend llama.cpp: llama.cpp's own graph, recorded through its eval callback,
diffed against tapdiff's reference. A clean llama.cpp passes on fixtures of both architectures
and every tensor family, with f16 and q8_0 KV caches and flash attention on and off, every
mapped tap compared; the taps llama.cpp has no node for are "not available", never faked; and
misconfigurations injected through llama.cpp's own --override-kv are found in its trace."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tapdiff_trace import TraceReader

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = "1,70,200,33,5,90,12,140"
N_PREDICT = 8
K_SHAPE = ["--n-embd", "256", "--n-ff", "512", "--n-head", "8", "--n-head-kv", "2"]
FIXTURES = {
    "llama-f32": ["--arch", "llama", "--n-layer", "3"],
    "llama-f16": ["--arch", "llama", "--type", "F16"],
    "llama-bf16": ["--arch", "llama", "--type", "BF16"],
    "llama-q8_0": ["--arch", "llama", "--type", "Q8_0"],
    "llama-q4_0": ["--arch", "llama", "--type", "Q4_0"],
    "llama-q4_1": ["--arch", "llama", "--type", "Q4_1"],
    "qwen2-q5_0": ["--arch", "qwen2", "--type", "Q5_0"],
    "qwen2-q5_1": ["--arch", "qwen2", "--type", "Q5_1"],
    "llama-q4_k_m": ["--arch", "llama", *K_SHAPE, "--type", "Q4_K", "--tensor-type", "blk.*.attn_v.weight=Q6_K",
                     "--tensor-type", "blk.*.ffn_down.weight=Q6_K", "--tensor-type", "output.weight=Q6_K"],
    "qwen2-f32": ["--arch", "qwen2", "--n-layer", "3"],
    # heads of 64: llama.cpp stores a quantized cache rotated (attn_rot_k, attn_rot_v).
    "llama-f32-h64": ["--arch", "llama", "--n-embd", "256", "--n-head", "4", "--n-head-kv", "2", "--n-layer", "2"],
    "qwen2-q8_0-tied": ["--arch", "qwen2", "--type", "Q8_0", "--tied"],
    "qwen2-q5_k": ["--arch", "qwen2", *K_SHAPE, "--type", "Q5_K"],
    # qwen3: q/k norm per head, heads wider than n_embd / n_head (as Qwen3's 128 at 1024 / 16).
    "qwen3-f32": ["--arch", "qwen3", "--head-dim", "32", "--n-layer", "3"],
    "qwen3-q8_0-tied": ["--arch", "qwen3", "--head-dim", "32", "--type", "Q8_0", "--tied"],
    "qwen3-q4_k": ["--arch", "qwen3", *K_SHAPE, "--head-dim", "64", "--type", "Q4_K"],
    # Llama 3.1: a llama GGUF with rope_freqs.weight, base 5e5, the llama-bpe pre-tokenizer.
    "llama3-f32": ["--arch", "llama3"],
    "llama3-q4_k": ["--arch", "llama3", *K_SHAPE, "--type", "Q4_K", "--tensor-type", "blk.*.ffn_down.weight=Q6_K"],
    # gemma2: GeGLU, scaled embeddings, post-norms, soft-caps, even layers sliding (window 4 of 16 positions).
    "gemma2-f32": ["--arch", "gemma2", "--n-layer", "3"],
    "gemma2-q8_0": ["--arch", "gemma2", "--type", "Q8_0"],
    "gemma2-q4_k": ["--arch", "gemma2", *K_SHAPE, "--type", "Q4_K"],
    # gemma3: gemma2's layout without soft-caps, q/k norm, five sliding layers (RoPE base 1e4) to one global (1e6).
    "gemma3-f32": ["--arch", "gemma3", "--n-layer", "6"],
    "gemma3-q4_k": ["--arch", "gemma3", *K_SHAPE, "--type", "Q4_K"],
    # Gemma 3 27B's attention scale, 1/sqrt(n_embd / n_head) (llama.cpp knows the model by its 62 layers).
    "gemma3-f32-27b-scale": ["--arch", "gemma3", "--n-layer", "62", "--head-dim", "32"],
    # The sliding layers' own RoPE base, rope.freq_base_swa (the converter writes it from HF's rope_parameters).
    "gemma3-f32-swa-base": ["--arch", "gemma3", "--n-layer", "6", "--rope-base-swa", "20000"],
    "gemma2-f32-swa-base": ["--arch", "gemma2", "--rope-base-swa", "20000"],
    # RoPE scaling: Gemma 3 4B+'s linear 8 on the global layer (5), Qwen3 128k's YaRN 4 (original context 128).
    "gemma3-f32-linear": ["--arch", "gemma3", "--n-layer", "6", "--rope-scaling", "linear"],
    "qwen3-q8_0-yarn": ["--arch", "qwen3", "--head-dim", "32", "--type", "Q8_0", "--rope-scaling", "yarn"],
    # Phi-3.5's LongRoPE over an original context of 256 (8192 / 32): a run within it takes the short factors.
    "phi3-f32-longrope": ["--arch", "phi3", "--n-ctx", "8192", "--rope-scaling", "longrope"],
    # Phi-4-mini: that, with 3/4 of each head rotated (12 of 16 dimensions) and a tied head.
    "phi4mini-q8_0": ["--arch", "phi3", "--n-ctx", "8192", "--rope-scaling", "longrope", "--rope-dim", "12", "--tied",
                      "--type", "Q8_0"],
    # phi3: q/k/v fused in attn_qkv, gate/up in ffn_up (llama.cpp's fused MUL_MATs split into taps).
    "phi3-f32": ["--arch", "phi3", "--n-layer", "3"],
    "phi3-q4_k": ["--arch", "phi3", *K_SHAPE, "--type", "Q4_K"],
    # A mixture of experts: qwen3moe (8 experts, 2 a token), and Mixtral's llama layout.
    "qwen3moe-f32": ["--arch", "qwen3moe", "--head-dim", "32", "--n-layer", "3"],
    "qwen3moe-q4_k": ["--arch", "qwen3moe", *K_SHAPE, "--head-dim", "64", "--type", "Q4_K"],
    "mixtral-q8_0": ["--arch", "llama", "--n-expert", "4", "--n-expert-used", "2", "--type", "Q8_0"],
    # SmolLM3: llama without RoPE in every fourth layer (3, 7, ...), a tied head.
    "smollm3-f32": ["--arch", "smollm3", "--n-layer", "4", "--tied"],
    "smollm3-q4_k": ["--arch", "smollm3", *K_SHAPE, "--n-layer", "4", "--type", "Q4_K"],
    # Ministral 3: YaRN x16 of magnitude 1 (yarn_log_multiplier), Llama 4's attention temperature from
    # YaRN's original context, 4 here, on.
    "mistral3-f32": ["--arch", "mistral3", "--n-ctx", "64"],
    "mistral3-q4_k": ["--arch", "mistral3", *K_SHAPE, "--n-ctx", "64", "--type", "Q4_K"],
    # Granite: llama with its embedding, residual, attention (1/head_dim) and logit multipliers.
    "granite-f32": ["--arch", "granite", "--tied"],
    "granite-q5_0": ["--arch", "granite", "--type", "Q5_0"],
    "granitemoe-q8_0": ["--arch", "granitemoe", "--type", "Q8_0"],
}
STORIES = Path(os.environ["TAPDIFF_SOURCE_DIR"]).parent / "shared" / "models" / "stories260K.gguf"


def tapdiff(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module", autouse=True)
def llama_built():
    p = tapdiff("run", "--backend", "llama.cpp", "-m", "/nonexistent.gguf", "--tokens", "1")
    if "built without llama.cpp" in p.stderr:
        pytest.skip(p.stderr.strip())


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    out = {}
    for name, spec in FIXTURES.items():
        out[name] = d / f"{name}.gguf"
        assert tapdiff("fixture", "--seed", "5", *spec, "-o", out[name]).returncode == 0
    if STORIES.exists():
        out["stories260K"] = STORIES
    return out


@pytest.fixture(scope="module")
def references(models, tmp_path_factory):
    d = tmp_path_factory.mktemp("ref")
    out = {}
    for name, model in models.items():
        out[name] = d / f"{name}.h5"
        p = tapdiff("run", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--logits", "all", "-o", out[name])
        assert p.returncode == 0, p.stderr
    return out


def llama_run(model, trace, *options):
    p = tapdiff("run", "--backend", "llama.cpp", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT,
                "--logits", "all", "--threads", 2, "-o", trace, *options)
    assert p.returncode == 0, p.stderr
    return p


def head_dim(trace):
    with TraceReader(str(trace)) as t:
        return t.dims["head_dim"]


def diff_json(expected, actual):
    p = tapdiff("diff", expected, actual, "--format", "json")
    return p.returncode, json.loads(p.stdout)


CACHES = {"f16": [], "f16-flash": ["--llama-flash-attn"], "q8_0-flash": ["--llama-kv-type", "q8_0", "--llama-flash-attn"]}


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("fixture", sorted(FIXTURES) + ["stories260K"])
def test_clean_llama_cpp_passes_against_the_reference(models, references, tmp_path, fixture, cache):
    if fixture not in models:
        pytest.skip(f"{STORIES} is absent")
    trace = tmp_path / "llama.h5"
    if cache.startswith("q8_0") and head_dim(references[fixture]) % 32:
        # llama.cpp's own rule: a q8_0 cache row is whole blocks of 32.
        p = tapdiff("run", "--backend", "llama.cpp", "-m", models[fixture], "--tokens", PROMPT, *CACHES[cache])
        assert p.returncode == 2 and "does not divide n_embd_head_k" in p.stderr, p.stderr
        return
    llama_run(models[fixture], trace, *CACHES[cache])
    code, report = diff_json(references[fixture], trace)
    worst = max(report["taps"], key=lambda t: (t["worst_nmse"] or 0) / t["threshold_nmse"])
    assert code == 0 and report["verdict"] == "pass", (
        f"{fixture} {cache}: first divergence {report['first_divergence']}; worst tap {worst['tap']} "
        f"nmse {worst['worst_nmse']:.3g} vs threshold {worst['threshold_nmse']:.3g} ({report['profile']})")
    with TraceReader(str(trace)) as t:
        n_layer = t.dims["n_layer"]
        unavailable = set(t.unavailable)
        arch = t.hparams["arch"]
        experts = "n_expert" in t.hparams
    # Every catalogue tap llama.cpp has a node for is compared, at every layer (qwen3: its q/k
    # norms too; gemma2: its post-norms; a mixture of experts: the router's logits, the routing
    # and the experts' rows, put in ascending expert order, for the dense gate, up and activation).
    compared = {(x["name"], x["layer"]) for x in report["taps"]}
    per_layer = (19 + 2 * (arch in ("qwen3", "gemma3", "qwen3moe")) + 2 * (arch in ("gemma2", "gemma3"))
                 + 2 * experts - len(unavailable))
    assert len(compared) == 3 + per_layer * n_layer, sorted(compared)
    # attn.probs.summary is derived from attn.probs: without it (flash attention), without both.
    expected_unavailable = {"kv.k", "kv.v"} | ({"attn.probs", "attn.probs.summary"} if "flash" in cache else set())
    assert unavailable == expected_unavailable | ({"resid.attn"} if arch == "phi3" else set())
    notes = [f for f in report["findings"] if f["kind"] == "not-available"]
    assert {f["tap"] for f in notes} == unavailable and not [f for f in report["findings"] if f["kind"].startswith("missing")]


def test_llama_cpp_applies_the_llama3_frequency_factors_as_tapdiff_does(models, references, tmp_path):
    """Passing at the f16 profile could hide factors one side ignores: layer 0's rotation is compared
    at f32 closeness, and an engine that ignores them is caught in llama.cpp's trace."""
    trace, ignored = tmp_path / "llama.h5", tmp_path / "ignored.h5"
    llama_run(models["llama3-f32"], trace)
    p = tapdiff("diff", references["llama3-f32"], trace, "--format", "json", "--all-taps")
    rope = {t["tap"]: t["worst_nmse"] for t in json.loads(p.stdout)["taps"]}
    assert rope["blk.0.attn_q.rope"] < 1e-10 and rope["blk.0.attn_k.rope"] < 1e-10, rope
    p = tapdiff("run", "--backend", "host", "-m", models["llama3-f32"], "--tokens", PROMPT, "-n", N_PREDICT,
                "--inject", "rope-freq-factors-ignored", "-o", ignored)
    assert p.returncode == 0, p.stderr
    code, report = diff_json(trace, ignored)
    assert code == 1 and report["first_divergence"]["tap"] == "blk.0.attn_q.rope"
    assert report["diagnosis"]["variant"] == "the frequency factors (rope_freqs.weight) not applied"


@pytest.mark.parametrize("fixture,layer,position,variant", [
    ("gemma3-f32-linear", 5, 1, "the model's RoPE scaling (linear x8) not applied"),
    ("qwen3-q8_0-yarn", 0, 0, "the model's RoPE scaling (yarn x4) not applied")])
def test_llama_cpp_scales_rope_as_tapdiff_does(models, references, tmp_path, fixture, layer, position, variant):
    """Passing at the f16 (q8) profile could hide a scaling one side ignores: the scaled layer's
    rotation adds no error to its input's (a rotation keeps an error's relative size), and an
    engine that ignores the scaling is caught in llama.cpp's trace, named."""
    trace, ignored = tmp_path / "llama.h5", tmp_path / "ignored.h5"
    llama_run(models[fixture], trace)
    p = tapdiff("diff", references[fixture], trace, "--format", "json", "--all-taps")
    nmse = {t["tap"]: t["worst_nmse"] for t in json.loads(p.stdout)["taps"]}
    for x in ("q", "k"):
        rotated, into = nmse[f"blk.{layer}.attn_{x}.rope"], nmse[f"blk.{layer}.attn_{x}_norm"]
        assert rotated < 4 * into + 1e-10, (x, rotated, into)
    p = tapdiff("run", "--backend", "host", "-m", models[fixture], "--tokens", PROMPT, "-n", N_PREDICT,
                "--inject", "rope-scaling-ignored", "-o", ignored)
    assert p.returncode == 0, p.stderr
    code, report = diff_json(trace, ignored)
    first = report["first_divergence"]
    assert code == 1 and (first["tap"], first["position"]) == (f"blk.{layer}.attn_q.rope", position), first
    assert report["diagnosis"]["variant"].startswith(variant), report["diagnosis"]


def test_llama_cpp_picks_longrope_factors_by_its_padded_context(tmp_path):
    """LongRoPE over an original context of 16: a run of 20 positions takes the long factors in both;
    one of 16 takes the short ones in tapdiff (16 is within 16) and the long ones in llama.cpp,
    which pads its context to 256 before it chooses. diff names that choice."""
    model = tmp_path / "phi3.gguf"
    assert tapdiff("fixture", "--arch", "phi3", "--rope-scaling", "longrope", "-o", model).returncode == 0
    for n, verdict in ((12, "pass"), (8, "diverged")):
        ref, trace = tmp_path / f"ref{n}.h5", tmp_path / f"llama{n}.h5"
        for backend, out in (("reference", ref), ("llama.cpp", trace)):
            p = tapdiff("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", n, "-o", out)
            assert p.returncode == 0, p.stderr
        code, report = diff_json(ref, trace)
        assert report["verdict"] == verdict, (n, report["first_divergence"])
    assert report["first_divergence"]["tap"] == "blk.0.attn_q.rope", report["first_divergence"]
    assert report["diagnosis"]["variant"].startswith("LongRoPE's long factors instead of the short ones"), \
        report["diagnosis"]


def test_llama_cpp_caps_and_slides_gemma2_attention_as_tapdiff_does(models, references, tmp_path):
    """llama.cpp's attention on gemma2 zeroes the keys outside a sliding layer's window exactly where
    the reference does, and its soft-cap is real: an engine without one is caught in llama.cpp's trace."""
    trace, uncapped = tmp_path / "llama.h5", tmp_path / "uncapped.h5"
    llama_run(models["gemma2-f32"], trace)
    with TraceReader(str(references["gemma2-f32"])) as r, TraceReader(str(trace)) as t:
        for layer in (0, 1):  # layer 0 slides, layer 1 sees every earlier key
            _, expected = r.read("attn.probs", layer)
            _, actual = t.read("attn.probs", layer)
            assert ((expected > 0) == (actual > 0)).all()
        _, probs = r.read("attn.probs", 0)
        assert (probs[-1][:, :len(probs) - 4] == 0).all() and (probs[-1][:, len(probs) - 4:len(probs)] > 0).all()
    p = tapdiff("run", "--backend", "host", "-m", models["gemma2-f32"], "--tokens", PROMPT, "-n", N_PREDICT,
                "--inject", "attn-softcap-missing", "-o", uncapped)
    assert p.returncode == 0, p.stderr
    code, report = diff_json(trace, uncapped)
    assert code == 1 and report["first_divergence"]["tap"] == "blk.0.attn.probs"
    assert report["diagnosis"]["class"] == "softcap", report["diagnosis"]


def faulty_engine_against_llama_cpp(models, fixture, fault, tmp_path):
    """llama.cpp's trace of `fixture`, and the diff of the host engine with `fault` against it."""
    trace, faulty = tmp_path / "llama.h5", tmp_path / "faulty.h5"
    llama_run(models[fixture], trace)
    p = tapdiff("run", "--backend", "host", "-m", models[fixture], "--tokens", PROMPT, "-n", N_PREDICT,
                "--inject", fault, "-o", faulty)
    assert p.returncode == 0, p.stderr
    return (trace, *diff_json(trace, faulty))


def test_llama_cpp_rotates_gemma3_sliding_layers_at_their_own_base(models, tmp_path):
    """A PASS could hide a base llama.cpp does not use: an engine rotating the sliding layers at the
    global base is caught in llama.cpp's trace, named as such."""
    _, code, report = faulty_engine_against_llama_cpp(models, "gemma3-f32", "rope-local-base-ignored", tmp_path)
    assert code == 1 and report["first_divergence"]["tap"] == "blk.0.attn_q.rope"
    assert "of the global layers instead of this sliding layer's" in report["diagnosis"]["variant"]


def test_llama_cpp_leaves_smollm3_nope_layers_unrotated(models, tmp_path):
    """llama.cpp hands attention a NoPE layer's q and k as projected (no ROPE node): the trace holds
    them, and an engine that rotates every layer is caught at the first NoPE layer, named so."""
    trace, code, report = faulty_engine_against_llama_cpp(models, "smollm3-f32", "rope-nope-rotated", tmp_path)
    with TraceReader(str(trace)) as t:
        _, q = t.read("attn_q", 3)
        _, q_rope = t.read("attn_q.rope", 3)
        _, q_rope_0 = t.read("attn_q.rope", 0)
        _, q_0 = t.read("attn_q", 0)
    assert (q_rope == q).all() and not (q_rope_0[1:] == q_0[1:]).all()
    assert code == 1 and report["first_divergence"]["tap"] == "blk.3.attn_q.rope", report["first_divergence"]
    assert report["diagnosis"]["class"] == "rope" and "no positional encoding" in report["diagnosis"]["variant"]


def test_llama_cpp_tempers_mistral3_attention_as_tapdiff_does(models, tmp_path):
    """Llama 4's temperature is 1 below position 4 here: an engine without it is right there and
    caught from position 4 on in llama.cpp's own trace, named so."""
    _, code, report = faulty_engine_against_llama_cpp(models, "mistral3-f32", "attn-temperature-ignored", tmp_path)
    first = report["first_divergence"]
    assert code == 1 and (first["tap"], first["position"]) == ("blk.0.attn.probs", 4), first
    assert report["diagnosis"]["class"] == "attention-scale" and "temperature not applied" in report["diagnosis"]["variant"]


@pytest.mark.parametrize("fault, tap, position, cls, words", [
    ("resid-multiplier-ignored", "blk.0.resid.attn", 0, "residual", "residual multiplier 0.22 not applied"),
    # The faulty engine records logits from the prompt's last position on.
    ("logit-scale-ignored", "output", 7, "logit-scale", "not divided by the logit scale 8"),
])
def test_llama_cpp_applies_granites_multipliers_as_tapdiff_does(models, tmp_path, fault, tap, position, cls, words):
    """A PASS could hide a multiplier neither side applies: an engine leaving one out is caught in
    llama.cpp's own trace, where it first acts, and named."""
    _, code, report = faulty_engine_against_llama_cpp(models, "granite-f32", fault, tmp_path)
    first = report["first_divergence"]
    assert code == 1 and (first["tap"], first["position"]) == (tap, position), first
    assert report["diagnosis"]["class"] == cls and words in report["diagnosis"]["variant"], report["diagnosis"]


def test_trace_says_how_llama_cpp_ran(models, tmp_path):
    trace = tmp_path / "llama.h5"
    llama_run(models["llama-q4_k_m"], trace, "--llama-kv-type", "q8_0", "--llama-flash-attn")
    with TraceReader(str(trace)) as t:
        assert t.metadata["producer"] == "llama.cpp"
        assert t.metadata["producer_version"].startswith("llama.cpp ")
        assert t.metadata["precision"] == "q8"
        assert t.settings["kv_type"] == "q8_0" and t.settings["flash_attn"] == 1 and t.settings["threads"] == 2
        assert "Q4_K" in t.settings["weight_types"] and "Q6_K" in t.settings["weight_types"] and t.settings["backend"]
        assert "not available from llama.cpp" in t.unavailable["kv.k"]
        positions, _ = t.read("output", -1)
        assert list(positions) == list(range(8 + N_PREDICT - 1))  # --logits all: every prompt row
        n_layer = t.dims["n_layer"]
    # inspect's catalogue check: what llama.cpp cannot record is listed as unavailable, not missing.
    catalogue = json.loads(tapdiff("inspect", "--json", trace).stdout)["catalogue"]
    assert catalogue["ok"] and not catalogue["missing"]
    # kv.k, kv.v, and with flash attention attn.probs and its summary.
    assert len(catalogue["unavailable"]) == 4 * n_layer and "blk.0.kv.k" in catalogue["unavailable"]
    assert "blk.0.attn.probs.summary" in catalogue["unavailable"]


# A 4- or 5-bit cache moves attention's rows past f16's tolerance; the replay clears them only
# when it rounds K, V and q as llama.cpp stored them: in blocks of 32, in the Hadamard-rotated
# basis where head_dim is a multiple of 64 (F32 weights: the cache is the only coarse arithmetic).
@pytest.mark.parametrize("cache", ["q4_0", "q5_1", "iq4_nl"])
@pytest.mark.parametrize("fixture,rotated", [("qwen3-f32", 0), ("llama-f32-h64", 1)])
def test_a_quantized_cache_is_replayed_as_llama_cpp_stores_it(models, references, tmp_path, fixture, rotated, cache):
    trace = tmp_path / "llama.h5"
    llama_run(models[fixture], trace, "--llama-kv-type", cache, "--llama-flash-attn")
    with TraceReader(str(trace)) as t:
        assert (t.settings["attn_rot_k"], t.settings["attn_rot_v"]) == (rotated, rotated)
    p = tapdiff("diff", references[fixture], trace, "--profile", "f16", "--format", "json")
    report = json.loads(p.stdout)
    assert p.returncode == 0, report["first_divergence"]
    cleared = [f["detail"] for f in report["findings"] if f["kind"] == "amplified" and f["tap"].endswith("attn.out")]
    assert cleared, "no attention row past f16's tolerance: nothing here tests the cache's rounding"
    for detail in cleared:
        assert float(re.search(r"residual ([0-9.e+-]+)\)", detail).group(1)) < 1e-6, detail


# An engine checked against llama.cpp on quantized weights: a bug in an op that computes in f32
# is judged at that op's precision, not at the 8-bit activations' of the GEMMs before it.
@pytest.mark.parametrize("fault,tap,cls", [("attn-scale", "blk.0.attn.probs", "attention-scale"),
                                           ("norm-weight-dropped", "blk.0.attn_norm", "normalization")])
def test_a_bug_past_the_gemms_is_found_against_llama_cpp_on_quantized_weights(models, tmp_path, fault, tap, cls):
    expected, actual = tmp_path / "llama.h5", tmp_path / "engine.h5"
    llama_run(models["llama-q4_k_m"], expected)
    p = tapdiff("run", "--backend", "host", "-m", models["llama-q4_k_m"], "--tokens", PROMPT, "-n", N_PREDICT,
                "--logits", "all", "--inject", fault, "-o", actual)
    assert p.returncode == 0, p.stderr
    code, report = diff_json(expected, actual)
    assert report["profile"] == "q8"
    assert code == 1 and report["first_divergence"]["tap"] == tap, report["first_divergence"]
    assert report["diagnosis"]["class"] == cls, report["diagnosis"]


# Rows of one tap judged one by one: a 4-bit cache's noise at the prompt's positions is cleared
# as inherited while the tap's decode rows are the engine's own error, found where it starts.
def test_a_decode_bug_is_found_where_it_starts_against_a_4_bit_cache(models, tmp_path):
    expected, actual = tmp_path / "llama.h5", tmp_path / "engine.h5"
    llama_run(models["llama-f32-h64"], expected, "--llama-kv-type", "q4_0", "--llama-flash-attn")
    p = tapdiff("run", "--backend", "host", "-m", models["llama-f32-h64"], "--tokens", PROMPT, "-n", N_PREDICT,
                "--logits", "all", "--inject", "kv-stuck-length", "-o", actual)
    assert p.returncode == 0, p.stderr
    code, report = diff_json(expected, actual)
    assert code == 1 and report["first_divergence"]["position"] == 8, report["first_divergence"]
    assert report["diagnosis"]["class"] == "kv-cache" and not report["diagnosis"]["in_expected"], report["diagnosis"]


# llama.cpp's phi3 graph leaves resid.attn unnamed: ffn_norm's input is missing from its trace,
# so nothing can say which side's ffn_norm is off its inputs; the engine's dropped residual is
# found at ffn_norm, without blaming llama.cpp's trace.
def test_an_op_whose_input_one_trace_lacks_is_not_blamed_on_that_trace(models, tmp_path):
    expected, actual = tmp_path / "llama.h5", tmp_path / "engine.h5"
    llama_run(models["phi3-q4_k"], expected)
    p = tapdiff("run", "--backend", "host", "-m", models["phi3-q4_k"], "--tokens", PROMPT, "-n", N_PREDICT,
                "--logits", "all", "--inject", "resid-attn-dropped", "-o", actual)
    assert p.returncode == 0, p.stderr
    code, report = diff_json(expected, actual)
    assert code == 1 and report["first_divergence"]["tap"] == "blk.0.ffn_norm", report["first_divergence"]
    assert not report["diagnosis"]["in_expected"], report["diagnosis"]
    assert not [f for f in report["findings"] if f["kind"] == "expected-off-its-inputs"]


# With a 4-bit cache, phi3's ffn_norm carries attention's amplified noise through resid.attn,
# which llama.cpp's phi3 graph leaves unnamed: the jump test reads what resid.attn's own inputs
# carry (it read the missing input as exact, and ffn_norm's 3.8e-2 as a divergence).
def test_an_input_llama_cpp_does_not_name_carries_its_inputs_error(tmp_path):
    model, ref, llama = tmp_path / "phi3.gguf", tmp_path / "ref.h5", tmp_path / "llama.h5"
    assert tapdiff("fixture", "--seed", "5", "--arch", "phi3", "--type", "Q4_K", "--n-embd", "256", "--n-head", "4",
                   "--n-head-kv", "2", "--n-ff", "512", "-o", model).returncode == 0
    tokens = "1,70,200,33,5,90,12,140,7,99,250,3"
    assert tapdiff("run", "-m", model, "--tokens", tokens, "-n", 16, "-o", ref).returncode == 0
    p = tapdiff("run", "--backend", "llama.cpp", "-m", model, "--tokens", tokens, "-n", 16, "--llama-kv-type", "q4_0",
                "--llama-flash-attn", "--threads", 2, "-o", llama)
    assert p.returncode == 0, p.stderr
    code, report = diff_json(ref, llama)
    assert code == 0, report["first_divergence"]


def test_precision_follows_weights_and_cache(models, tmp_path):
    expect = {("llama-f32", "f32"): "f32", ("llama-f32", "f16"): "f16", ("llama-bf16", "f32"): "bf16",
              ("llama-q8_0", "f32"): "q8", ("llama-f16", "f32"): "f16"}
    for (fixture, cache), precision in expect.items():
        trace = tmp_path / f"{fixture}-{cache}.h5"
        llama_run(models[fixture], trace, "--llama-kv-type", cache)
        with TraceReader(str(trace)) as t:
            assert t.metadata["precision"] == precision, (fixture, cache)


# Misconfigurations a user reproduces with llama.cpp's --override-kv: each is found at its op in
# llama.cpp's own trace, against the reference of the correctly configured model.
MISCONFIGURED = [
    ("rope base", "llama-f32", "llama.rope.freq_base=float:500", "attn_q.rope", "rope"),
    ("rms eps", "qwen2-f32", "qwen2.attention.layer_norm_rms_epsilon=float:0.5", "attn_norm", "normalization"),
]


@pytest.mark.parametrize("what,fixture,override,tap,cls", MISCONFIGURED, ids=[m[0] for m in MISCONFIGURED])
def test_misconfiguration_is_found_in_llama_cpps_trace(models, references, tmp_path, what, fixture, override, tap, cls):
    trace = tmp_path / "llama.h5"
    llama_run(models[fixture], trace, "--llama-override", override)
    code, report = diff_json(references[fixture], trace)
    assert code == 1
    first = report["first_divergence"]
    assert (first["name"], first["layer"], first["position"]) == (tap, 0, 1 if cls == "rope" else 0), first
    assert report["diagnosis"]["class"] == cls, report["diagnosis"]


def test_a_kv_head_count_llama_cpp_cannot_load_is_exit_2_with_its_reason(models):
    # A wrong head_count_kv changes the K and V weights' expected shapes: llama.cpp's loader
    # refuses the model, and tapdiff passes its reason on.
    p = tapdiff("run", "--backend", "llama.cpp", "-m", models["llama-q4_k_m"], "--tokens", "1,2",
                "--llama-override", "llama.attention.head_count_kv=int:8")
    assert p.returncode == 2 and "blk.0.attn_k.weight' has wrong shape" in p.stderr, p.stderr


def test_bad_llama_options_are_exit_2(models, tmp_path):
    model = models["llama-f32"]
    for options, needle in [
        (["--llama-override", "llama.rope.freq_base=5000"], "KEY=TYPE:VALUE"),
        (["--llama-override", "llama.rope.freq_base=float:fast"], "is not a float"),
        # Overrides llama.cpp never applies: a mistyped key, a key read as another type.
        (["--llama-override", "llama.rope.freq_bas=float:500"],
         'llama.rope.freq_bas=float:500: llama.cpp did not apply it: it reads no key "llama.rope.freq_bas"'),
        (["--llama-override", "llama.rope.freq_base=int:500"], "llama.rope.freq_base=int:500: llama.cpp did not apply"),
        (["--llama-kv-type", "q9_9"], "--llama-kv-type"),
        (["--precision", "f16"], "--precision f16"),
        (["--inject", "attn-scale"], "--llama-override"),
    ]:
        p = tapdiff("run", "--backend", "llama.cpp", "-m", model, "--tokens", "1,2", *options)
        assert p.returncode == 2 and needle in p.stderr, (options, p.stderr)
    p = tapdiff("run", "--backend", "host", "-m", model, "--tokens", "1,2", "--llama-kv-type", "q8_0")
    assert p.returncode == 2 and "--backend llama.cpp" in p.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    p = tapdiff("run", "--backend", "llama.cpp", "-m", bad, "--tokens", "1")
    assert p.returncode == 2 and str(bad) in p.stderr


@pytest.mark.parametrize("fixture,precision", [("llama-f32", "f16"), ("llama-q4_k_m", "q8")])  # f16: its default KV cache
def test_corpus_gate_of_llama_cpp_follows_the_precision_its_trace_declares(models, fixture, precision):
    """check --corpus --backend llama.cpp: llama.cpp's logits against the reference's over text, under
    the gate of the precision llama.cpp's trace declares (q8 on quantized weights)."""
    text = Path(os.environ["TAPDIFF_SOURCE_DIR"]) / "fixtures" / "corpus" / "stories.txt"
    p = tapdiff("check", "-m", models[fixture], "--corpus", text, "--window", 32, "--max-windows", 2,
                "--backend", "llama.cpp", "--format", "json")
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert report["actual"] == f"llama.cpp {precision}" and report["scored"] == 2 * 15
    gate = {"f16": 1e-4, "q8": 2e-2}[precision]
    assert report["gate"]["max_kld_mean"] == gate and report["kld"]["mean"] < gate


def test_a_tap_filter_of_exact_names_keeps_those_taps(models, tmp_path):
    # The filter sees short names and layers, like every producer's: "blk.0.attn_q" named
    # exactly, and attn.probs.summary kept while attn.probs itself is left out.
    trace = tmp_path / "filtered.h5"
    llama_run(models["llama-f32"], trace, "--taps", "blk.0.attn_q,blk.1.attn.probs.summary,output")
    with TraceReader(str(trace)) as t:
        kept = sorted((tap.name, tap.layer) for tap in t.taps() if tap.n_rows > 0)
    assert kept == [("attn.probs.summary", 1), ("attn_q", 0), ("output", -1)], kept
