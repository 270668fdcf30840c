"""tapdiff run --backend transformers: the GGUF loaded by Hugging Face transformers (float32,
eager attention), every catalogue tap recorded from its modules and its cache, diffed against
tapdiff's reference: PASS at the f32 profile with every tap of every layer compared, llama's
Q and K put back in GGUF order, what transformers' GGUF loader leaves out of the config (head
width, partial rotation, soft-caps, attention scale, RoPE scaling) filled from the GGUF; bad
input is exit 2."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from tapdiff_trace import TraceReader

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = "1,70,200,33,5,90,12,140"
N_PREDICT = 6
K_SHAPE = ["--n-embd", "256", "--n-ff", "512", "--n-head", "8", "--n-head-kv", "2"]
FIXTURES = {
    "llama-f32-gqa": ["--arch", "llama", "--n-head", "4", "--n-head-kv", "2"],
    "llama-q4_k": ["--arch", "llama", *K_SHAPE, "--type", "Q4_K"],
    "qwen2-q8_0-tied": ["--arch", "qwen2", "--type", "Q8_0", "--tied"],
    # transformers' GGUF loader reads no RoPE scaling for llama or qwen2: the producer sets it.
    "llama-f32-linear": ["--arch", "llama", "--rope-scaling", "linear", "--rope-scaling-factor", "4"],
    "qwen2-f32-yarn": ["--arch", "qwen2", "--rope-scaling", "yarn"],
    # Real Qwen3 heads are wider than n_embd / n_head: transformers reads no key_length for qwen3.
    "qwen3-f32-wide-heads-yarn": ["--arch", "qwen3", "--head-dim", "32", "--rope-scaling", "yarn"],
    # Phi-4-mini: 3/4 of each head rotated, LongRoPE (the run's 14 positions within the original
    # context 16: the short factors), a tied head; and Phi-3.5 past its original context (4).
    "phi3-q8_0-partial-longrope": ["--arch", "phi3", "--type", "Q8_0", "--rope-dim", "12", "--tied",
                                   "--rope-scaling", "longrope"],
    "phi3-f32-longrope-long": ["--arch", "phi3", "--rope-scaling", "longrope", "--rope-scaling-factor", "128"],
    # Soft-capped scores and logits, every other layer sliding over 4 keys, norms 1 + w.
    "gemma2-q8_0": ["--arch", "gemma2", "--type", "Q8_0"],
    # Five sliding layers (base 1e4, unscaled) to one global one (base 1e6, linear 8), q/k norm.
    "gemma3-f32-linear": ["--arch", "gemma3", "--n-layer", "6", "--rope-scaling", "linear"],
    # Gemma 2 27B's attention scale, 1/sqrt(n_embd / n_head): its 46 layers say so.
    "gemma2-f32-27b-scale": ["--arch", "gemma2", "--n-layer", "46", "--head-dim", "32"],
    # The sliding layers' own base, rope.freq_base_swa, into rope_parameters["sliding_attention"].
    "gemma3-f32-swa-base": ["--arch", "gemma3", "--n-layer", "6", "--rope-base-swa", "20000"],
    # A mixture of experts, recorded from transformers' own expert loop (8 experts, 2 a token).
    "qwen3moe-q8_0": ["--arch", "qwen3moe", "--head-dim", "32", "--type", "Q8_0"],
}
# Taps each layer records beyond the 19 of a dense llama: q/k norm, gemma's post-norms, the
# experts' five in place of ffn_gate, ffn_up and ffn.act.
EXTRA_TAPS = {"qwen3": 2, "gemma2": 2, "gemma3": 4, "qwen3moe": 4}
STORIES = Path(os.environ["TAPDIFF_SOURCE_DIR"]).parent / "shared" / "models" / "stories260K.gguf"


def tapdiff(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module", autouse=True)
def transformers_installed():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        pytest.skip(f"transformers is not installed in the test Python ({e}); scripts/bootstrap.sh installs it")


@pytest.mark.parametrize("fixture", sorted(FIXTURES) + ["stories260K"])
def test_transformers_passes_against_the_reference(tmp_path, fixture):
    if fixture == "stories260K":
        if not STORIES.exists():
            pytest.skip(f"{STORIES} is absent")
        model = STORIES
    else:
        model = tmp_path / "m.gguf"
        assert tapdiff("fixture", "--seed", "8", *FIXTURES[fixture], "-o", model).returncode == 0
    ref, hf = tmp_path / "ref.h5", tmp_path / "hf.h5"
    assert tapdiff("run", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--logits", "all", "-o", ref).returncode == 0
    p = tapdiff("run", "--backend", "transformers", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "--logits", "all",
                "-o", hf)
    assert p.returncode == 0, p.stderr
    d = tapdiff("diff", ref, hf, "--format", "json")
    report = json.loads(d.stdout)
    assert d.returncode == 0 and report["verdict"] == "pass" and report["profile"] == "f32", report["first_divergence"]
    with TraceReader(str(hf)) as t:
        assert t.metadata["producer"] == "transformers" and t.complete
        n_layer = t.dims["n_layer"]
        permuted = t.settings["qk_layout"].startswith("permuted")
        arch = t.hparams["arch"]
        positions, _ = t.read("output", -1)
        assert list(positions) == list(range(8 + N_PREDICT - 1))  # --logits all
    # Every catalogue tap, the cache read-backs and the softmax weights (and their summary) included.
    assert len(report["taps"]) == 3 + (19 + EXTRA_TAPS.get(arch, 0)) * n_layer
    assert permuted == (arch == "llama")
    assert not [f for f in report["findings"] if f["kind"] != "metadata"], report["findings"]


def test_a_permutation_left_undone_is_found_at_attn_q(tmp_path):
    """The Q/K layout matters: the producer's GGUF reordering is what makes llama's attn_q equal."""
    model, ref, hf = tmp_path / "m.gguf", tmp_path / "ref.h5", tmp_path / "hf.h5"
    assert tapdiff("fixture", "--arch", "llama", "-o", model).returncode == 0
    assert tapdiff("run", "-m", model, "--tokens", PROMPT, "-n", 2, "-o", ref).returncode == 0
    env = dict(os.environ, PYTHONPATH=str(Path(os.environ["TAPDIFF_SOURCE_DIR"]) / "python"))
    script = ("import sys, tapdiff_transformers as t; t.gguf_order = lambda x, d: x; "
              f"sys.exit(t.main(['-m', '{model}', '--tokens', '{PROMPT}', '-n', '2', '-o', '{hf}']))")
    p = subprocess.run([os.environ["TAPDIFF_PYTHON"], "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads(tapdiff("diff", ref, hf, "--format", "json").stdout)
    assert report["first_divergence"]["name"] == "attn_q" and report["first_divergence"]["layer"] == 0


def test_bad_input_is_exit_2(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 40)
    p = tapdiff("run", "--backend", "transformers", "-m", bad, "--tokens", "1", "-o", tmp_path / "x.h5")
    assert p.returncode == 2 and str(bad) in p.stderr, p.stderr
    model = tmp_path / "m.gguf"
    assert tapdiff("fixture", "--arch", "qwen2", "-o", model).returncode == 0
    for options, needle in [(["--inject", "attn-scale"], "--inject"), (["--precision", "f16"], "--precision f16"),
                            (["--layers", "0"], "records every tap"), ([], None)]:
        args = ["run", "--backend", "transformers", "-m", model, "--tokens", "1,2", *options]
        p = tapdiff(*args) if needle is None else tapdiff(*args, "-o", tmp_path / "x.h5")
        assert p.returncode == 2, (options, p.stderr)
        assert (needle or "-o") in p.stderr, (options, p.stderr)


def test_an_architecture_the_producer_does_not_record_is_refused_by_name(tmp_path):
    """Before loading the weights, whose loader would fail with messages about tensor sizes (the
    producer made to know one architecture fewer: every fixture architecture is known)."""
    model, out = tmp_path / "qwen3moe.gguf", tmp_path / "x.h5"
    assert tapdiff("fixture", "--arch", "qwen3moe", "-o", model).returncode == 0
    env = dict(os.environ, PYTHONPATH=str(Path(os.environ["TAPDIFF_SOURCE_DIR"]) / "python"))
    script = ("import sys, tapdiff_transformers as t; del t.ARCHS['qwen3moe']; "
              f"sys.exit(t.main(['-m', '{model}', '--tokens', '1,2', '-o', '{out}']))")
    p = subprocess.run([os.environ["TAPDIFF_PYTHON"], "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 2, p.stderr
    assert ("transformers loads it as qwen3_moe; this producer records llama, qwen2, qwen3, phi3, gemma2, gemma3"
            in p.stderr), p.stderr
    assert "size mismatch" not in p.stderr.lower() and not out.exists()


def test_a_sliding_base_transformers_cannot_hold_is_refused(tmp_path):
    """transformers' gemma2 rotates every layer at one base: a model whose sliding layers have their
    own would run otherwise than it says."""
    model = tmp_path / "gemma2.gguf"
    assert tapdiff("fixture", "--arch", "gemma2", "--rope-base-swa", "20000", "-o", model).returncode == 0
    p = tapdiff("run", "--backend", "transformers", "-m", model, "--tokens", "1,2", "-o", tmp_path / "x.h5")
    assert p.returncode == 2, p.stderr
    assert ("gemma2.rope.freq_base_swa: transformers' gemma2 rotates every layer at one base (10000), this model its "
            "sliding ones at 20000") in p.stderr, p.stderr


def test_what_the_gguf_loader_leaves_out_is_filled_and_named(tmp_path):
    """The trace's settings say which config fields the producer set from the GGUF."""
    model, hf = tmp_path / "m.gguf", tmp_path / "hf.h5"
    assert tapdiff("fixture", *FIXTURES["phi3-q8_0-partial-longrope"], "-o", model).returncode == 0
    p = tapdiff("run", "--backend", "transformers", "-m", model, "--tokens", "1,2", "-n", 1, "-o", hf)
    assert p.returncode == 0, p.stderr
    with TraceReader(str(hf)) as t:
        assert t.settings["config.partial_rotary_factor"] == "0.75", t.settings
        assert t.settings["config.rope_scaling"] == "longrope", t.settings


def test_weights_the_gguf_does_not_fill_are_refused_not_initialized_at_random(tmp_path):
    """A llama GGUF with experts (Mixtral's layout) loads in transformers as a dense llama whose FFN
    weights the file lacks; transformers would initialize them at random and run another model."""
    model = tmp_path / "mixtral.gguf"
    assert tapdiff("fixture", "--arch", "llama", "--n-expert", "4", "--n-expert-used", "2", "-o", model).returncode == 0
    p = tapdiff("run", "--backend", "transformers", "-m", model, "--tokens", "1,2", "-o", tmp_path / "x.h5")
    assert p.returncode == 2, p.stderr
    assert "transformers found no weights for 6 of the llama model's parameters" in p.stderr, p.stderr
    assert "initialized at random" in p.stderr and not (tmp_path / "x.h5").exists()


def test_transformers_chooses_longrope_factors_per_call_and_diff_names_it(tmp_path):
    """transformers picks LongRoPE's factors for each forward call by its last position; llama.cpp and
    tapdiff once for the run. A prompt within the original context (8) whose generation passes it
    is prefilled with the short factors there, with the long ones here: diff names exactly that."""
    model, ref, hf = tmp_path / "m.gguf", tmp_path / "ref.h5", tmp_path / "hf.h5"
    assert tapdiff("fixture", "--arch", "phi3", "--rope-scaling", "longrope", "--rope-scaling-factor", "64",
                   "-o", model).returncode == 0
    assert tapdiff("run", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "-o", ref).returncode == 0
    p = tapdiff("run", "--backend", "transformers", "-m", model, "--tokens", PROMPT, "-n", N_PREDICT, "-o", hf)
    assert p.returncode == 0, p.stderr
    report = json.loads(tapdiff("diff", ref, hf, "--format", "json").stdout)
    first = report["first_divergence"]
    assert (first["name"], first["layer"], first["position"]) == ("attn_q.rope", 0, 1), first
    assert report["diagnosis"]["evidence"] == "reproduced", report["diagnosis"]
    assert report["diagnosis"]["variant"] == ("LongRoPE's short factors instead of the long ones "
                                              "(the run's 14 positions are past the original context 8)")


def test_experts_taken_in_another_token_order_are_recorded_on_their_tokens(tmp_path):
    """The producer records an expert's products on the tokens whose inputs they hold: an experts
    loop (a user's rewrite) that takes each expert's tokens in ascending order rather than
    transformers' slot-then-token order still passes."""
    model, ref, hf = tmp_path / "m.gguf", tmp_path / "ref.h5", tmp_path / "hf.h5"
    assert tapdiff("fixture", *FIXTURES["qwen3moe-q8_0"], "-o", model).returncode == 0
    assert tapdiff("run", "-m", model, "--tokens", PROMPT, "-n", 2, "-o", ref).returncode == 0
    env = dict(os.environ, PYTHONPATH=str(Path(os.environ["TAPDIFF_SOURCE_DIR"]) / "python"))
    script = f"""
import sys, torch, tapdiff_transformers as t
from transformers.models.qwen3_moe import modeling_qwen3_moe as m
def forward(self, hidden, chosen, weights):
    out = torch.zeros_like(hidden)
    for e in sorted(set(chosen.flatten().tolist())):
        tokens, slots = (chosen == e).nonzero(as_tuple=True)
        gate, up = torch.nn.functional.linear(hidden[tokens], self.gate_up_proj[e]).chunk(2, dim=-1)
        y = torch.nn.functional.linear(self.act_fn(gate) * up, self.down_proj[e])
        out.index_add_(0, tokens, y * weights[tokens, slots, None])
    return out
m.Qwen3MoeExperts.forward = forward
sys.exit(t.main(['-m', '{model}', '--tokens', '{PROMPT}', '-n', '2', '-o', '{hf}']))
"""
    p = subprocess.run([os.environ["TAPDIFF_PYTHON"], "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    report = json.loads(tapdiff("diff", ref, hf, "--format", "json").stdout)
    assert report["verdict"] == "pass", report["first_divergence"]


@pytest.mark.parametrize("log_multiplier", [1.0, 0.5])
def test_yarns_magnitude_reaches_transformers_as_llama_cpp_computes_it(tmp_path, log_multiplier):
    """Mistral 3's yarn_log_multiplier (HF's mscale_all_dim) sets cos and sin's magnitude: the rope
    parameters the producer gives transformers carry the magnitude tapdiff's config computes
    (`inspect`: attn_factor times 1 + 0.1 ln factor), 1 at a multiplier of 1."""
    import gguf
    import math
    from tapdiff_hf_config import GgufKeys, rope_scaling
    fixture, model = tmp_path / "fixture.gguf", tmp_path / "m.gguf"
    assert tapdiff("fixture", "--arch", "mistral3", "--n-ctx", "64", "-o", fixture).returncode == 0
    reader, writer = gguf.GGUFReader(str(fixture)), gguf.GGUFWriter(str(model), "mistral3")
    for field in reader.fields.values():  # a copy with the multiplier changed
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = log_multiplier if field.name == "mistral3.rope.scaling.yarn_log_multiplier" else field.contents()
        writer.add_key_value(field.name, value, field.types[0], field.types[-1] if len(field.types) > 1 else None)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_shape=list(reversed([int(n) for n in t.shape])), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    config = json.loads(tapdiff("inspect", "--json", model).stdout)["config"]["rope_scaling"]
    expected = config["attn_factor"] * (0.1 * math.log(config["factor"]) + 1)
    given = rope_scaling(GgufKeys(str(model)), type("Config", (), {})())["attention_factor"]
    assert abs(given - expected) < 1e-6 * expected, (given, expected)
    assert (abs(expected - 1) < 1e-6) == (log_multiplier == 1.0)
