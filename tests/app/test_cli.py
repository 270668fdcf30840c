"""The tapdiff CLI as a user runs it: subcommands, outputs, exit codes and error messages."""
import json
import os
import subprocess

import gguf  # independent GGUF reader (PyPI), to check our files from the outside
import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]


def run(*args, check_code=None):
    p = subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check_code is not None:
        assert p.returncode == check_code, f"exit {p.returncode}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    return p


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.gguf"
    run("fixture", "--arch", "llama", "--seed", 3, "-o", path, check_code=0)
    return path


def test_fixture_is_deterministic(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    run("fixture", "--arch", "qwen2", "--type", "Q8_0", "--seed", 9, "-o", a, check_code=0)
    run("fixture", "--arch", "qwen2", "--type", "Q8_0", "--seed", 9, "-o", b, check_code=0)
    assert a.read_bytes() == b.read_bytes()


def test_fixture_readable_by_gguf_py(tmp_path):
    path = tmp_path / "q.gguf"
    run("fixture", "--arch", "qwen2", "--n-layer", 2, "--n-vocab", 300, "--type", "F16",
        "--tensor-type", "blk.*.ffn_down.weight=Q8_0", "-o", path, check_code=0)
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["blk.1.ffn_down.weight"].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert tensors["blk.0.attn_q.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_q.bias"].tensor_type == gguf.GGMLQuantizationType.F32
    assert list(tensors["blk.0.ffn_up.weight"].shape) == [64, 128]
    field = reader.fields["general.architecture"]
    assert bytes(field.parts[field.data[0]]).decode() == "qwen2"
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 300


def test_inspect_text(tiny):
    out = run("inspect", tiny, check_code=0).stdout
    assert "GGUF v3" in out
    assert "general.architecture" in out and 'string "llama"' in out
    assert "tokenizer.ggml.tokens" in out and "array<string>[320]" in out
    assert "blk.1.ffn_down.weight" in out and "[128, 64]" in out
    assert "arch llama, 2 layers, n_embd 64, n_head 4 (kv 2, head_dim 16)" in out
    assert "norm (adjacent pairs)" in out


def test_inspect_json(tiny):
    info = json.loads(run("inspect", "--json", tiny, check_code=0).stdout)
    assert info["gguf_version"] == 3
    assert info["config"]["n_layer"] == 2
    assert info["config"]["rope_pairing"] == "norm"
    names = [t["name"] for t in info["tensors"]]
    assert names[0] == "token_embd.weight" and "output.weight" in names
    assert info["metadata"]["tokenizer.ggml.tokens"]["count"] == 320


def test_inspect_missing_file_exit_2():
    p = run("inspect", "/nonexistent/model.gguf", check_code=2)
    assert "/nonexistent/model.gguf" in p.stderr and "cannot open" in p.stderr


def test_inspect_not_gguf_exit_2(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello world, not a model")
    p = run("inspect", bad, check_code=2)
    assert f"{bad}: magic (offset 0): expected \"GGUF\"" in p.stderr


def test_inspect_truncated_exit_2(tiny, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny.read_bytes()[:-100])
    p = run("inspect", cut, check_code=2)
    assert "output.weight" in p.stderr and "data section holds only" in p.stderr


def test_fixture_incompatible_type_exit_2(tmp_path):
    p = run("fixture", "--type", "Q4_K", "-o", tmp_path / "x.gguf", check_code=2)
    assert "Q4_K needs the row width ne[0] = 64 to be a multiple of 256" in p.stderr
    assert not (tmp_path / "x.gguf").exists()


def test_fixture_unknown_type_exit_2(tmp_path):
    p = run("fixture", "--type", "Q3_X", "-o", tmp_path / "x.gguf", check_code=2)
    assert 'unknown tensor type "Q3_X"' in p.stderr


def test_usage_errors_exit_2():
    assert run().returncode == 2
    assert run("inspect").returncode == 2
    assert run("no-such-command").returncode == 2
    assert run("fixture", "--n-layer", "many", "-o", "x").returncode == 2


def test_help_exit_0():
    p = run("--help", check_code=0)
    assert "fixture" in p.stdout and "inspect" in p.stdout
