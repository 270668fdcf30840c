"""tapdiff import: tensor dumps another program wrote (.npy, .safetensors, transformers-style
names, a leading batch axis) and a name map become a trace that diffs like any other: the
reference's own tensors dumped and imported pass, a perturbed one is found where it was
perturbed, and bad maps or dumps are exit 2 naming the file and the field."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

from tapdiff_trace import TraceReader

TAPDIFF = os.environ["TAPDIFF_BIN"]
PROMPT = [1, 20, 40, 60, 80]
HF = {  # transformers module names -> catalogue taps
    "model.embed_tokens": "token_embd",
    "model.layers.{layer}.input_layernorm": "attn_norm",
    "model.layers.{layer}.self_attn.q_proj": "attn_q",
    "model.layers.{layer}.self_attn.k_proj": "attn_k",
    "model.layers.{layer}.self_attn.v_proj": "attn_v",
    "model.layers.{layer}.self_attn.o_proj": "attn_output",
    "model.layers.{layer}.post_attention_layernorm": "ffn_norm",
    "model.layers.{layer}.mlp.down_proj": "ffn_down",
    "model.norm": "output_norm",
}


def run(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=300)


def safetensors(path, tensors):
    header, data = {}, b""
    for name, array in tensors.items():
        raw = np.ascontiguousarray(array, dtype=np.float16).tobytes()
        header[name] = {"dtype": "F16", "shape": list(array.shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    """The reference's taps dumped as a transformers debugger would: (1, positions, width),
    layer 0 as .npy files (f32), layer 1 in one .safetensors file (f16)."""
    d = tmp_path_factory.mktemp("import")
    model, ref = d / "m.gguf", d / "ref.h5"
    assert run("fixture", "--arch", "llama", "-o", model).returncode == 0
    assert run("run", "-m", model, "--tokens", ",".join(map(str, PROMPT)), "-n", 0, "-o", ref).returncode == 0
    dumps = d / "dumps"
    dumps.mkdir()
    layer1 = {}
    with TraceReader(str(ref)) as r:
        for pattern, tap in HF.items():
            for layer in ([0, 1] if "{layer}" in pattern else [-1]):
                _, values = r.read(tap, layer)
                name = pattern.replace("{layer}", str(layer))
                if layer == 1:
                    layer1[name] = values[np.newaxis]
                else:
                    np.save(dumps / f"{name}.npy", values[np.newaxis].astype(np.float32))
        # Laid out otherwise: attention weights as (batch, head, position, key), the attention
        # output per head as (batch, position, head, dim).
        _, probs = r.read("attn.probs", 0)
        np.save(dumps / "model.layers.0.self_attn.attn_weights.npy", probs.transpose(1, 0, 2)[np.newaxis])
        _, out = r.read("attn.out", 0)
        np.save(dumps / "model.layers.0.self_attn.per_head.npy", out.reshape(5, 4, -1)[np.newaxis])
    safetensors(dumps / "layer1.safetensors", layer1)
    np.save(dumps / "model.rotary_emb.npy", np.zeros((1, 5, 4), np.float32))  # no tap: listed, not imported
    the_map = d / "map.json"
    taps = dict(HF)
    taps["model.layers.{layer}.self_attn.attn_weights"] = {"tap": "attn.probs",
                                                          "axes": ["batch", "head", "position", "key"]}
    taps["model.layers.{layer}.self_attn.per_head"] = {"tap": "attn.out", "axes": ["batch", "position", "head", "dim"]}
    the_map.write_text(json.dumps({"tokens": PROMPT, "model": {"path": str(model)}, "taps": taps}))
    return d, ref, dumps, the_map


def test_imported_dumps_diff_like_a_trace(dumped, tmp_path):
    d, ref, dumps, the_map = dumped
    out = tmp_path / "imported.h5"
    p = run("import", dumps, "--map", the_map, "-o", out)
    assert p.returncode == 0, p.stderr
    assert "18 taps, 5 positions" in p.stdout and "not mapped: model.rotary_emb" in p.stdout
    assert "aligned blk.0.attn.probs: axes (batch, head, position, key) -> (position, head, key)" in p.stdout
    assert "aligned blk.0.attn.out: axes (batch, position, head, dim) -> (position, head, dim), row [4, 16] " \
           "flattened to [64]" in p.stdout
    report = json.loads(run("diff", ref, out, "--profile", "f16", "--format", "json").stdout)
    assert report["verdict"] == "pass"
    assert len(report["taps"]) == 19  # the 18 imported and attn.probs.summary, which the writer derives


def test_a_perturbed_dump_is_found_where_it_was_perturbed(dumped, tmp_path):
    d, ref, dumps, the_map = dumped
    bad = tmp_path / "dumps"
    bad.mkdir()
    for f in dumps.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    q = np.load(bad / "model.layers.0.self_attn.q_proj.npy")
    q[0, 2:] *= 1.5
    np.save(bad / "model.layers.0.self_attn.q_proj.npy", q)
    out = tmp_path / "imported.h5"
    assert run("import", bad, "--map", the_map, "-o", out).returncode == 0
    p = run("diff", ref, out, "--profile", "f16", "--format", "json")
    assert p.returncode == 1
    first = json.loads(p.stdout)["first_divergence"]
    assert (first["tap"], first["position"]) == ("blk.0.attn_q", 2)


WEIGHTS = "model.layers.{layer}.self_attn.attn_weights"


@pytest.mark.parametrize("change, field, where", [
    ({"taps": {"model.norm": "final_norm"}}, "is not a catalogue tap", "map"),
    ({"taps": {"model.layers.self_attn.q_proj": "attn_q"}}, "needs {layer}", "map"),
    ({"tokens": []}, "tokens", "map"),
    ({"prompt_length": 9}, "prompt_length", "map"),
    ({"taps": {WEIGHTS: {"tap": "attn.probs", "axes": ["head", "key"]}}}, "one \"position\" axis", "map"),
    # A key the map does not know is a typo that would change the trace silently.
    ({"prompt_lenght": 3}, "prompt_lenght: unknown key; expected tokens, prompt_length", "map"),
    ({"model": {"path": "m.gguf", "sha": "0"}}, "model.sha: unknown key; expected path, sha256", "map"),
    ({"taps": {"model.norm": {"tap": "output_norm", "first": 2}}}, "taps.model.norm.first: unknown key", "map"),
    ({"taps": {"model.norm": {"tap": "output_norm", "first_position": 5}}}, "first_position: expected the position",
     "map"),
    # Rows from position 3 on: the 5 positions of the dump do not fit the 5 tokens.
    ({"taps": {"model.norm": {"tap": "output_norm", "first_position": 3}}}, "5 positions from position 3",
     "model.norm.npy"),
    # The map is fine, the dump does not have the axes it declares: the dump is named.
    ({"taps": {WEIGHTS: {"tap": "attn.probs", "axes": ["position", "key"]}}}, "2 axes declared",
     "model.layers.0.self_attn.attn_weights.npy"),
])
def test_a_bad_map_is_exit_2_naming_the_field(dumped, tmp_path, change, field, where):
    d, ref, dumps, the_map = dumped
    m = json.loads(the_map.read_text())
    m.update(change)
    bad_map = tmp_path / "map.json"
    bad_map.write_text(json.dumps(m))
    out = tmp_path / "out.h5"
    p = run("import", dumps, "--map", bad_map, "-o", out)
    assert p.returncode == 2 and field in p.stderr, p.stderr
    assert (str(bad_map) if where == "map" else where) in p.stderr, p.stderr
    assert not out.exists()


def test_a_dump_of_the_last_position_says_where_it_starts(dumped, tmp_path):
    """A dump of the last position alone (last-token logits, a final norm) declares its first
    position: its row is compared at that position, not at position 0."""
    d, ref, dumps, the_map = dumped
    last = tmp_path / "dumps"
    last.mkdir()
    norm = np.load(dumps / "model.norm.npy")
    np.save(last / "model.norm.npy", norm[:, -1:])
    m = json.loads(the_map.read_text())
    m["taps"] = {"model.norm": {"tap": "output_norm", "first_position": len(PROMPT) - 1}}
    one_map = tmp_path / "map.json"
    one_map.write_text(json.dumps(m))
    out = tmp_path / "last.h5"
    p = run("import", last, "--map", one_map, "-o", out)
    assert p.returncode == 0, p.stderr
    with TraceReader(str(out)) as r:
        positions, _ = r.read("output_norm", -1)
    assert list(positions) == [len(PROMPT) - 1]
    report = json.loads(run("diff", ref, out, "--profile", "f16", "--format", "json").stdout)
    assert report["verdict"] == "pass" and report["summary"]["positions"] == 1, report["summary"]


def test_a_bad_dump_is_exit_2_naming_the_file(dumped, tmp_path):
    d, ref, dumps, the_map = dumped
    bad = tmp_path / "dumps"
    bad.mkdir()
    np.save(bad / "model.norm.npy", np.zeros((1, 5, 64), np.int32))
    p = run("import", bad, "--map", the_map, "-o", tmp_path / "out.h5")
    assert p.returncode == 2 and "model.norm.npy" in p.stderr and "descr" in p.stderr, p.stderr
    (bad / "model.norm.npy").write_bytes(b"\x93NUMPY\x01\x00\xff\xff")
    p = run("import", bad, "--map", the_map, "-o", tmp_path / "out.h5")
    assert p.returncode == 2 and "header_len" in p.stderr, p.stderr
    (bad / "model.norm.npy").unlink()
    (bad / "x.safetensors").write_bytes(struct.pack("<Q", 4) + b"{]}x")
    p = run("import", bad, "--map", the_map, "-o", tmp_path / "out.h5")
    assert p.returncode == 2 and "x.safetensors" in p.stderr and "header" in p.stderr, p.stderr
