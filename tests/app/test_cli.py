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


@pytest.mark.parametrize("arch, text, config", [
    ("qwen3", "q/k RMSNorm per head", {"qk_norm": True, "head_dim": 32}),
    ("llama3", "RoPE frequency factors (rope_freqs.weight)", {"rope_freq_factors": True, "rope_freq_base": 500000}),
    ("gemma2", "GeGLU; embeddings times sqrt(n_embd); post-attention and post-FFN norms; attention soft-cap 1; "
               "logit soft-cap 2; sliding window 4 on the even layers",
     {"activation": "gelu", "post_norms": True, "attn_softcap": 1, "final_softcap": 2, "sliding_window": 4}),
    ("gemma3", "q/k RMSNorm per head; GeGLU; embeddings times sqrt(n_embd); post-attention and post-FFN norms; "
               "sliding window 4 on layers l with l % 6 < 5; sliding layers' RoPE base 10000",
     {"qk_norm": True, "attn_softcap": 0, "rope_freq_base": 1000000, "rope_freq_base_swa": 10000}),
    ("phi3", "q, k and v fused in attn_qkv; gate and up fused in ffn_up", {"fused_qkv": True, "fused_gate_up": True}),
])
def test_inspect_shows_what_an_architecture_adds(tmp_path, arch, text, config):
    model = tmp_path / f"{arch}.gguf"
    run("fixture", "--arch", arch, *(["--head-dim", "32"] if arch == "qwen3" else []), "-o", model, check_code=0)
    assert text in run("inspect", model, check_code=0).stdout
    got = json.loads(run("inspect", "--json", model, check_code=0).stdout)["config"]
    assert {k: got[k] for k in config} == config


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


# ---- run, diff, check: the workflows and their exit codes ----------------------------------

PROMPT = "1,70,200,33,5"


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen")
    model = d / "q.gguf"
    run("fixture", "--arch", "qwen2", "--seed", 4, "-o", model, check_code=0)
    ref = d / "ref.h5"
    run("run", "-m", model, "--tokens", PROMPT, "-n", 4, "-o", ref, check_code=0)
    return model, ref


def test_run_prints_tokens_and_writes_a_complete_trace(qwen, tmp_path):
    model, _ = qwen
    trace = tmp_path / "host.h5"
    p = run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 4, "-o", trace, check_code=0)
    assert p.stdout.startswith("tokens: 1,70,200,33,5,")
    info = json.loads(run("inspect", "--json", trace, check_code=0).stdout)
    assert info["complete"] is True and info["producer"]["kind"] == "engine-host"
    assert info["catalogue"]["ok"] is True


def test_run_cuda_without_a_device_says_so_and_uses_host(qwen, tmp_path):
    model, _ = qwen
    p = run("run", "--backend", "cuda", "-m", model, "--tokens", PROMPT, "-n", 2, "-o", tmp_path / "c.h5")
    assert p.returncode == 0, p.stderr
    assert "running the host executor" in p.stderr or "engine-cuda" in run("inspect", tmp_path / "c.h5").stdout


def test_diff_clean_engine_passes(qwen, tmp_path):
    model, ref = qwen
    trace = tmp_path / "host.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 4, "-o", trace, check_code=0)
    p = run("diff", ref, trace, check_code=0)
    assert p.stdout.startswith("PASS")


def test_runs_of_other_lengths_compare_what_they_share(qwen, tmp_path):
    """attn.probs rows are as wide as a run's context (prompt + n-predict): a longer run's are
    wider. diff reads the longer run's rows over the shorter one's keys (the rest are future keys at
    every position both runs hold) and says so: every tap is compared, and a fault is still found."""
    model, ref = qwen  # -n 4: n_ctx 9
    longer, faulty = tmp_path / "longer.h5", tmp_path / "faulty.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 7, "-o", longer, check_code=0)
    for expected, actual in ((ref, longer), (longer, ref)):
        j = json.loads(run("diff", expected, actual, "--format", "json", check_code=0).stdout)
        assert j["verdict"] == "pass", j["summary"]
        rows = {t["tap"]: len(t["rows"]) for t in j["taps"]}
        assert rows["blk.0.attn_q"] == 8, rows  # the shorter run's 9 tokens, the last never fed
        assert all(rows[f"blk.{l}.attn.probs"] == 8 for l in (0, 1)), rows
        assert not [f for f in j["findings"] if f["kind"] == "shape"], j["findings"]
        notes = [f["detail"] for f in j["findings"] if f["kind"] == "context-length"]
        assert len(notes) == 1 and "compared over keys 0..8" in notes[0], j["findings"]
    p = run("diff", ref, longer, check_code=0)
    assert "n_ctx 9 in the expected trace and 12 in the actual" in " ".join(p.stdout.split()), p.stdout
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 7, "--inject", "rope-wrong-base",
        "-o", faulty, check_code=0)
    p = run("diff", ref, faulty, check_code=1)
    assert "attn_q.rope" in p.stdout.splitlines()[0], p.stdout


@pytest.mark.parametrize("fault, n_predict, position, bug_class", [
    ("kv-unsliced", 7, 5, "kv-cache"),  # the longer run's attention over its whole cache
    ("causal-mask-off", 2, 0, "attention-mask"),  # the shorter run's prefill sees later keys
])
def test_attention_faults_are_found_in_runs_of_other_lengths(qwen, tmp_path, fault, n_predict, position, bug_class):
    """An attention fault shows in attn.probs read over the shorter run's keys, and the replay of
    the faulty run (over its own context, then read the same way) names it."""
    model, ref = qwen  # -n 4
    faulty = tmp_path / "faulty.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", n_predict, "--inject", fault,
        "-o", faulty, check_code=0)
    j = json.loads(run("diff", ref, faulty, "--format", "json", check_code=1).stdout)
    first = j["first_divergence"]
    assert (first["tap"], first["position"]) == ("blk.0.attn.probs", position), first
    assert j["diagnosis"]["class"] == bug_class, j["diagnosis"]


def test_a_width_that_equals_the_context_is_still_a_shape_bug(tmp_path):
    """Only attn.probs is as wide as the run's context: an FFN of n_embd where n_ff belongs stays a
    shape finding even when the two runs' n_ctx happen to be n_ff and n_embd."""
    model, ref, eng = tmp_path / "s.gguf", tmp_path / "ref32.h5", tmp_path / "eng16.h5"
    run("fixture", "--n-embd", 16, "--n-head", 4, "--n-head-kv", 2, "--n-ff", 32, "-o", model, check_code=0)
    run("run", "-m", model, "--tokens", "1,2,3,4", "-n", 28, "-o", ref, check_code=0)  # n_ctx 32 = n_ff
    run("run", "--backend", "host", "-m", model, "--tokens", "1,2,3,4", "-n", 12, "--inject", "ffn-dim-wrong",
        "-o", eng, check_code=0)  # n_ctx 16 = n_embd
    p = run("diff", ref, eng, check_code=1)
    assert "n_embd used where n_ff belongs" in p.stdout, p.stdout
    assert "ffn_gate" not in "".join(line for line in p.stdout.splitlines() if "context-length" in line), p.stdout


def test_diff_with_a_fault_exits_1_and_writes_every_report(qwen, tmp_path):
    model, ref = qwen
    trace = tmp_path / "bad.h5"
    run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 4, "--inject", "bias-dropped",
        "-o", trace, check_code=0)
    reports = [tmp_path / f"r.{ext}" for ext in ("html", "md", "json", "xml", "txt")]
    args = [a for r in reports for a in ("-o" if r.suffix == ".txt" else "--report", r)]  # -o: run's spelling
    p = run("diff", ref, trace, "--format", "json", *args, check_code=1)
    j = json.loads(p.stdout)
    assert j["verdict"] == "diverged"
    assert j["first_divergence"]["tap"] == "blk.0.attn_q"
    assert j["diagnosis"]["class"] == "bias"
    for r in reports:
        assert r.exists() and r.stat().st_size > 100, r
    assert "blk.0.attn_q" in (tmp_path / "r.md").read_text()


def test_diff_bad_report_extension_writes_nothing(qwen, tmp_path):
    _, ref = qwen
    p = run("diff", ref, ref, "--report", tmp_path / "r.html", "--report", tmp_path / "r.pdf", check_code=2)
    assert "r.pdf" in p.stderr and ".html, .md, .json, .xml" in p.stderr
    assert not (tmp_path / "r.html").exists()


def test_diff_of_different_models_exits_2(qwen, tmp_path):
    _, ref = qwen
    other = tmp_path / "other.gguf"
    run("fixture", "--arch", "qwen2", "--seed", 5, "-o", other, check_code=0)
    trace = tmp_path / "other.h5"
    run("run", "-m", other, "--tokens", PROMPT, "-n", 4, "-o", trace, check_code=0)
    p = run("diff", ref, trace)
    assert p.returncode == 2
    assert "different models" in p.stdout


def test_diff_of_a_non_trace_exits_2(qwen, tmp_path):
    _, ref = qwen
    bogus = tmp_path / "bogus.h5"
    bogus.write_bytes(b"not hdf5 at all")
    p = run("diff", ref, bogus, check_code=2)
    assert str(bogus) in p.stderr


def test_check_exit_codes_and_golden(qwen, tmp_path):
    model, ref = qwen
    assert run("check", "-m", model, "--tokens", PROMPT, "-n", 4).returncode == 0
    p = run("check", "-m", model, "--tokens", PROMPT, "-n", 4, "--inject", "rope-wrong-base", "--format", "md")
    assert p.returncode == 1 and "rope" in p.stdout
    assert run("check", "--golden", ref).returncode == 0
    assert run("check", "--golden", ref, "--inject", "attn-scale").returncode == 1
    assert run("check", "--golden", ref, "--inject", "no-such-fault").returncode == 2


def test_check_of_a_long_prompt_without_the_attention_weights(qwen, tmp_path):
    # Both runs leave attn.probs out; the finding is in its summary, with its class.
    model, _ = qwen
    common = ["check", "-m", model, "--tokens", PROMPT, "-n", 4, "--taps", "!*.attn.probs", "--format", "json"]
    assert run(*common).returncode == 0
    p = run(*common, "--inject", "attn-scale")
    report = json.loads(p.stdout)
    assert p.returncode == 1 and report["first_divergence"]["tap"] == "blk.0.attn.probs.summary", report["first_divergence"]
    assert report["diagnosis"]["class"] == "attention-scale", report["diagnosis"]
    assert not any(t["name"] == "attn.probs" for t in report["taps"])


def test_repeated_runs_of_the_host_engine_agree(qwen, tmp_path):
    """--repeat compares the runs bit for bit (the detection itself: test_compare.cpp); the host
    engine is deterministic, so repeats agree and their traces are removed."""
    model, _ = qwen
    trace = tmp_path / "e.h5"
    p = run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 4, "--repeat", 3, "-o", trace)
    assert p.returncode == 0, p.stderr
    assert "repeats: 3 runs recorded identical traces" in p.stdout
    assert not list(tmp_path.glob("e.h5.repeat*"))
    assert run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "--repeat", 2).returncode == 2
    assert run("check", "-m", model, "--tokens", PROMPT, "-n", 4, "--repeat", 2).returncode == 0


def test_repeated_runs_of_a_racy_engine_are_nondeterministic(qwen, tmp_path):
    """ffn-down-race sums a timing-dependent prefix of ffn_down's terms: repeats disagree there,
    and that is the first finding, ahead of the comparison with the reference."""
    model, _ = qwen
    trace = tmp_path / "e.h5"
    p = run("run", "--backend", "host", "-m", model, "--tokens", PROMPT, "-n", 4, "--inject", "ffn-down-race",
            "--repeat", 2, "-o", trace)
    assert p.returncode == 1, p.stderr
    assert "nondeterministic: run 1 and run 2 differ first at blk.0.ffn_down position 0" in p.stdout
    assert (tmp_path / "e.h5.repeat2.h5").exists()
    p = run("check", "-m", model, "--tokens", PROMPT, "-n", 4, "--inject", "ffn-down-race", "--repeat", 2,
            "--format", "json")
    assert p.returncode == 1, p.stderr
    report = json.loads(p.stdout)
    assert report["roots"][0]["kind"] == "nondeterministic"
    assert report["first_divergence"]["tap"] == "blk.0.ffn_down"
    assert report["diagnosis"]["class"] == "nondeterministic"
    assert report["findings"][0]["kind"] == "nondeterministic"


def test_faults_lists_the_catalogue():
    out = run("faults", check_code=0).stdout
    for name in ["kv-stuck-length", "kv-append-offset", "kv-unsliced", "first-token-twice",
                 "prefill-rope-same-position", "rope-wrong-pairing", "rope-wrong-base", "weights-transposed",
                 "lm-head-op-n", "bias-dropped", "bias-misread", "dequant-q8-scale", "attn-scale",
                 "causal-mask-off", "gqa-head-map", "norm-weight-dropped", "dequant-missing",
                 "tensor-bytes-truncated", "weight-not-wired", "rope-position-ignored", "kv-not-written-decode",
                 "ffn-dim-wrong", "token-id-bookkeeping", "ffn-norm-loads-attn-norm", "kv-layer-shared",
                 "attn-keys-off-by-one", "softmax-sum-all-keys", "norm-weight-plus-one", "final-norm-skipped",
                 "resid-attn-dropped", "ffn-gelu-for-silu", "ffn-gate-up-swapped", "attn-v-aliases-k",
                 "lm-head-stale-row", "embed-scaled", "dequant-q8-unsigned", "rope-q-not-rotated",
                 "rope-freq-n-embd", "norm-mean-centered", "attn-out-heads-reversed", "kv-decode-write-late",
                 "resid-attn-doubled", "embed-position-for-token", "dequant-q8-block-stride", "ffn-up-op-n",
                 "ffn-down-race"]:
        assert name in out, name


def test_run_errors_exit_2(qwen, tmp_path):
    model, _ = qwen
    assert "--inject" in run("run", "-m", model, "--tokens", "1,2", "--inject", "attn-scale").stderr
    assert run("run", "-m", model, "--tokens", "1,2", "--precision", "f8").returncode == 2
    p = run("run", "-m", model, "--prompt", "hello", "--tokens", "1,2", check_code=2)
    assert "--prompt and --tokens" in p.stderr
    p = run("run", "--backend", "host", "-m", model, "--tokens", "1,2", "--inject", "nope", check_code=2)
    assert "nope" in p.stderr


def test_prompt_and_tokenize_on_a_byte_level_bpe_model(qwen):
    """The qwen2 fixture's gpt2 tokenizer: special tokens whole, --prompt text decodes back."""
    model, _ = qwen
    out = run("tokenize", model, "the cat<|endoftext|>", check_code=0).stdout
    assert out.startswith("ids: ") and out.rstrip().endswith("<|endoftext|>")
    assert "\u0120c" in out  # "Ġc": the space as GPT-2's byte symbol
    assert "text: the cat" in run("run", "-m", model, "--prompt", "the cat", "-n", 1, check_code=0).stdout


STORIES = os.path.join(os.environ["TAPDIFF_SOURCE_DIR"], "..", "shared", "models", "stories260K.gguf")
STORIES_TEXT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
                "One day, she saw")


@pytest.mark.skipif(not os.path.exists(STORIES), reason="no ../shared/models/stories260K.gguf (shared models absent)")
@pytest.mark.parametrize("backend,precision", [("reference", "f32"), ("host", "f32"), ("host", "f16"), ("host", "bf16")])
def test_stories260k_from_the_prompt_text(backend, precision):
    """The prompt text through the tokenizer, then 32 greedy tokens: llama.cpp's continuation (SOURCES.md)."""
    p = run("run", "--backend", backend, "--precision", precision, "-m", STORIES, "--prompt", "Once upon a time",
            "-n", 32, check_code=0)
    assert "tokens: 1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,338,401,396,267,337,410,408," \
           "419,292,411,322,265,282,295,433,426,385,328,432,358,394" in p.stdout
    assert f"text: {STORIES_TEXT}" in p.stdout


@pytest.mark.skipif(not os.path.exists(STORIES), reason="no ../shared/models/stories260K.gguf (shared models absent)")
def test_tokenize_prints_ids_and_pieces():
    out = run("tokenize", STORIES, "Once upon a time", check_code=0).stdout
    assert out.startswith("ids: 1,403,407,261,378")
    assert "\u2581upon" in out


@pytest.mark.skipif(not os.path.exists(STORIES), reason="no ../shared/models/stories260K.gguf (shared models absent)")
def test_selftest_localizes_every_applicable_fault_on_stories260k():
    out = run("selftest", "--model", STORIES, check_code=0).stdout
    assert "selftest: 80 passed, 0 failed" in out
    assert "| kv-stuck-length | stories260K.gguf | f16 | blk.0.attn.probs @ 5 · kv-cache |" in out


def test_weights_first_finds_a_loader_bug_before_any_activation(tmp_path):
    model = str(tmp_path / "q8.gguf")
    run("fixture", "--arch", "llama", "--type", "Q8_0", "--seed", 4, "-o", model, check_code=0)
    ref, eng = str(tmp_path / "ref.h5"), str(tmp_path / "eng.h5")
    run("run", "-m", model, "--tokens", "1,2,3", "-n", 2, "--weights", "-o", ref, check_code=0)
    run("run", "--backend", "host", "-m", model, "--tokens", "1,2,3", "-n", 2, "--weights=stats",
        "--inject", "weight-not-wired", "-o", eng, check_code=0)
    out = run("diff", ref, eng, check_code=1).stdout
    assert out.startswith("DIVERGED  weight.blk.0.attn_v.weight at position 0")
    assert "weight-loading (reproduced): all zero: the buffer was allocated but never filled" in out
    # Bad --weights values and an impossible combination are usage errors.
    assert run("run", "-m", model, "--tokens", "1,2", "--weights", "most", "-o", ref).returncode == 2
    p = run("run", "-m", model, "--tokens", "1,2", "--weights", "--positions", "0-1", "-o", ref)
    assert p.returncode == 2 and "--weights" in p.stderr
