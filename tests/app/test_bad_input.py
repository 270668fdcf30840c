"""Bad input at the CLI: exit 2 and a message naming the file (or option), the field and what
was expected. Files that claim more than they hold (a GGUF tensor of 10^12 elements, in a sparse
file really large enough to hold it; traces of 10^9 positions) are refused before anything is
allocated for the claim: the peak memory stays small."""
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import time

import h5py
import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
# Peak RSS of any tapdiff run by this test: the tiny models need ~30 MiB, honouring one of the
# claims would need gigabytes.
MAX_RSS_MIB = 300
Q4_0, Q4_0_BLOCK, Q4_0_BYTES = 2, 32, 18


def run(*args):
    return subprocess.run([TAPDIFF, *map(str, args)], capture_output=True, text=True, timeout=120)


def peak_child_rss_mib():
    """The largest peak RSS of any child this process has waited for (Linux: KiB)."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def write_sparse_huge_gguf(path, ne):
    """One Q4_0 tensor of shape ne; the file is extended (sparsely) to hold all its bytes."""
    info = gguf_string("huge") + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
    info += struct.pack("<IQ", Q4_0, 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + info
    data_offset = (len(head) + 31) // 32 * 32
    n_elements = 1
    for d in ne:
        n_elements *= d
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(data_offset + n_elements // Q4_0_BLOCK * Q4_0_BYTES)


def test_gguf_claiming_a_10e12_element_tensor_is_refused(tmp_path):
    path = tmp_path / "huge.gguf"
    write_sparse_huge_gguf(path, [10**6, 10**6])
    assert path.stat().st_size > 5 * 10**11
    for args in (["inspect", path], ["run", "--backend", "reference", "-m", path, "--tokens", "1", "-o", tmp_path / "t.h5"]):
        p = run(*args)
        assert p.returncode == 2, p.stderr
        assert f"{path}: tensor_info[0] \"huge\" ne" in p.stderr
        assert "claims 1000000000000 elements" in p.stderr
    assert peak_child_rss_mib() < MAX_RSS_MIB


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("trace")
    model, trace = d / "m.gguf", d / "t.h5"
    assert run("fixture", "--n-layer", 1, "-o", model).returncode == 0
    assert run("run", "-m", model, "--tokens", "1,2,3", "-n", 1, "--taps", "output_norm", "-o", trace).returncode == 0
    return trace


def claim_billion_tap_positions(f):
    stack = f["taps/output_norm"]  # a global tap: one slot
    stack["data"].resize(10**9, axis=0)
    f["committed"][int(stack.attrs["index"][0])] = (10**9, 1, 0)
    return "1000000000 committed positions is more than the 16777216 this reader accepts"


def claim_billion_tokens(f):
    f["tokens"].resize(10**9, axis=0)
    f.attrs["committed_tokens"] = 10**9
    return "/tokens: a committed count of 1000000000 is more than the 16777216 this reader accepts"


@pytest.mark.parametrize("claim", [claim_billion_tap_positions, claim_billion_tokens])
def test_trace_claiming_a_billion_positions_is_refused(tmp_path, small_trace, claim):
    path = tmp_path / "huge.h5"
    path.write_bytes(small_trace.read_bytes())
    with h5py.File(path, "r+") as f:
        message = claim(f)
    for args in (["inspect", path], ["diff", small_trace, path]):
        p = run(*args)
        assert p.returncode == 2, p.stderr
        assert str(path) in p.stderr and message in p.stderr, p.stderr
    assert peak_child_rss_mib() < MAX_RSS_MIB


@pytest.mark.parametrize("tokens,message", [
    ("1,x,3", '--tokens: item 2 "x": expected a token id (non-negative integer)'),
    ("1,,3", '--tokens: item 2 "": expected a token id'),
    ("-4", '--tokens: item 1 "-4": expected a token id'),
    ("99999999999", '--tokens: item 1 "99999999999": expected a token id'),
    ("1,99999", "--tokens: item 2 is token 99999, but"),
])
def test_bad_token_list(small_trace, tokens, message):
    model = small_trace.parent / "m.gguf"
    p = run("run", "-m", model, "--tokens", tokens, "-o", small_trace.parent / "never.h5")
    assert p.returncode == 2 and message in p.stderr, p.stderr
    assert not (small_trace.parent / "never.h5").exists()


@pytest.mark.parametrize("profile,message", [
    ('{"base": "f16", "nmse": {"attention": -1}}', "nmse.attention: expected a positive number, got -1"),
    ('{"base": "f16",', "profile: expected JSON"),
    ('{"base": "f16", "jump_factor": 1e400}', "profile: expected JSON"),  # found by fuzz_tolerance
    ('{"base": "f16", "nmse": {"no_such_class": 1}}', "nmse.no_such_class: unknown tap class"),
])
def test_bad_tolerance_profile(tmp_path, small_trace, profile, message):
    path = tmp_path / "p.json"
    path.write_text(profile)
    p = run("diff", small_trace, small_trace, "--profile", path)
    assert p.returncode == 2 and f"{path}: {message}" in p.stderr, p.stderr


@pytest.mark.parametrize("options,message", [
    (["--backend", "host", "--inject", "no-such-fault"], "no-such-fault"),
    (["--backend", "host", "--temperature", "0.7"], "--temperature: the engine decodes greedily"),
    (["--backend", "host", "--precision", "f64"], "--precision: the engine runs f32, f16, bf16 or q8"),
    (["--backend", "reference", "--precision", "q8"], "--precision: the reference runs f32 or f64"),
    (["--backend", "reference", "--prefill-chunk", "7"], "--prefill-chunk: the reference runs one token"),
    (["--backend", "reference", "--inject", "rope-wrong-base"], "--inject: faults are injected into the engine"),
    (["--backend", "host", "--positions", "0-1", "--weights"], "--weights: weight taps keep a tensor's rows"),
    (["--backend", "host", "--weight-cache", "10"], "--weight-cache: an option of --backend reference, not of host"),
    (["--weight-cache", "-1"], "--weight-cache: Value -1 not in range 0 to 1073741824"),
    (["--weight-cache", str(2**44)], f"--weight-cache: Value {2**44} not in range"),  # MiB: 2^64 bytes
    (["--backend", "host", "--prefill-chunk", "-1"], "--prefill-chunk: Value -1 not in range 0 to 2147483647"),
    (["--backend", "reference", "-n", "-1"], "--n-predict: expected >= 0, got -1"),
    (["--backend", "host", "-n", str(2**31 - 1)], "--n-predict: expected at most 2147483644 (with the 3 prompt"),
    (["--backend", "reference", "-n", str(2**31 - 9)], "KV cache and attention probabilities (1 layer of 32"),
    (["--backend", "host", "-n", str(2**31 - 9)], "KV cache and attention probabilities (1 layer of 32"),
    (["--taps", "no_such_tap"], "--taps: 'no_such_tap' matches no tap of"),
    (["--taps", "blk.*.attn_q,blk.7.ffn_up"], "--taps: 'blk.7.ffn_up' matches no tap of"),
    (["--backend", "host", "--layers", "2-9"], "--layers: expected layers within 0..0"),
    (["--positions", "5-9"], "--positions: expected positions within 0..4"),
])
def test_refused_options_leave_the_output_as_it_was(tmp_path, small_trace, options, message):
    """Every option is checked before the trace is opened: a refused run neither creates its -o
    file nor replaces one that is there."""
    model = small_trace.parent / "m.gguf"
    kept = tmp_path / "kept.h5"
    kept.write_bytes(small_trace.read_bytes())
    length = [] if "-n" in options else ["-n", 2]
    for out in (kept, tmp_path / "new.h5"):
        p = run("run", "-m", model, "--tokens", "1,2,3", *length, *options, "-o", out)
        assert p.returncode == 2 and message in p.stderr, p.stderr
    assert kept.read_bytes() == small_trace.read_bytes()
    assert not (tmp_path / "new.h5").exists()


def test_a_context_past_what_ulimit_allows_is_refused_before_the_run(tmp_path, small_trace):
    model = small_trace.parent / "m.gguf"
    limit = 1 << 31
    def child():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for backend in ("reference", "host"):
        p = subprocess.run([str(TAPDIFF), "run", "--backend", backend, "-m", str(model), "--tokens", "1,2,3",
                            "-n", str(8 << 20), "-o", str(tmp_path / "x.h5")], capture_output=True, text=True,
                           preexec_fn=child)
        assert p.returncode == 2 and "; ulimit -v allows 2.0 GiB" in p.stderr, p.stderr
        assert not (tmp_path / "x.h5").exists()


def test_a_run_past_the_training_context_says_so(tmp_path):
    model = tmp_path / "short.gguf"
    assert run("fixture", "--arch", "llama", "--seed", 3, "--n-ctx", 8, "-o", model).returncode == 0
    for backend in ("reference", "host"):
        p = run("run", "--backend", backend, "-m", model, "--tokens", "1,2,3", "-n", 5)
        assert p.returncode == 0 and "past" not in p.stderr, p.stderr
        p = run("run", "--backend", backend, "-m", model, "--tokens", "1,2,3", "-n", 6)
        assert p.returncode == 0, p.stderr
        assert f"the run's 9 positions go past {model}'s context length 8" in p.stderr, p.stderr


def test_traces_with_nothing_in_common_are_not_a_pass(tmp_path, small_trace):
    """diff and check --golden of traces that share no row (--positions windows apart, a golden
    recorded with no tap) say so and exit 2: a pass must have compared
    something."""
    model = small_trace.parent / "m.gguf"
    early, late = tmp_path / "early.h5", tmp_path / "late.h5"
    assert run("run", "-m", model, "--tokens", "1,2,3,4", "-n", 0, "--positions", "0-1", "-o", early).returncode == 0
    assert run("run", "-m", model, "--tokens", "1,2,3,4", "-n", 0, "--positions", "2-3", "--backend", "host",
               "-o", late).returncode == 0
    p = run("diff", early, late)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "nothing compared: no tap holds rows at a position both traces recorded" in p.stdout, p.stdout
    empty = tmp_path / "empty.h5"  # a golden that holds no tap, and no generated token
    assert run("run", "-m", model, "--tokens", "1,2,3,4", "-n", 0, "--taps", "!*", "-o", empty).returncode == 0
    p = run("check", "--golden", empty)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "nothing compared: the traces hold no tap in common; the expected trace holds no taps" in p.stdout, p.stdout


def test_every_report_counts_the_positions_it_compared(tmp_path, small_trace):
    """A trace recorded at some positions is compared at those: JSON and JUnit say how many, as
    the text does, beside the common token prefix."""
    model = small_trace.parent / "m.gguf"
    some, every = tmp_path / "some.h5", tmp_path / "every.h5"
    assert run("run", "-m", model, "--tokens", "1,2,3,4", "-n", 2, "--positions", "1-2", "-o", some).returncode == 0
    assert run("run", "-m", model, "--tokens", "1,2,3,4", "-n", 2, "--backend", "host", "-o", every).returncode == 0
    p = run("diff", some, every)
    assert p.returncode == 0 and "2 positions" in p.stdout, p.stdout
    p = run("diff", some, every, "--format", "json")
    report = json.loads(p.stdout)
    assert (report["compared_positions"], report["summary"]["positions"]) == (6, 2), report["summary"]
    p = run("diff", some, every, "--format", "junit")
    assert '<property name="compared_positions" value="6"/>' in p.stdout, p.stdout
    assert '<property name="positions_with_a_row_compared" value="2"/>' in p.stdout, p.stdout


def test_traces_of_generated_tokens_alone_compare_them(tmp_path, small_trace):
    """Traces that record no tap still hold the generated tokens: agreeing ones pass, a prompt
    alone compares nothing."""
    model = small_trace.parent / "m.gguf"
    for n in (0, 3):
        for backend in ("reference", "host"):
            assert run("run", "-m", model, "--tokens", "1,2,3", "-n", n, "--taps", "!*", "--backend", backend,
                       "-o", tmp_path / f"{backend}{n}.h5").returncode == 0
    p = run("diff", tmp_path / "reference3.h5", tmp_path / "host3.h5")
    assert p.returncode == 0 and p.stdout.startswith("PASS  the 3 generated tokens agree; no tap compared"), p.stdout
    p = run("diff", tmp_path / "reference0.h5", tmp_path / "host0.h5")
    assert p.returncode == 2 and "nothing compared: the traces hold no tap in common" in p.stdout, p.stdout


def test_unwritable_outputs(tmp_path, small_trace):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    model = small_trace.parent / "m.gguf"
    p = run("run", "-m", model, "--tokens", "1,2", "-o", not_a_dir / "t.h5")
    assert p.returncode == 2 and f"{not_a_dir / 't.h5'}: /: cannot create the trace" in p.stderr, p.stderr
    p = run("diff", small_trace, small_trace, "--report", not_a_dir / "r.html")
    assert p.returncode == 2 and f"{not_a_dir / 'r.html'}: report: cannot write" in p.stderr, p.stderr


def limit_file_size(limit):
    """A child whose writes past `limit` bytes fail (EFBIG, as ENOSPC on a full disk)."""
    def child():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return child


@pytest.mark.parametrize("extension", ["html", "json", "md", "xml"])
def test_a_report_that_cannot_be_written_leaves_nothing(tmp_path, small_trace, extension):
    report = tmp_path / f"r.{extension}"
    p = subprocess.run([TAPDIFF, "diff", small_trace, small_trace, "--report", report], capture_output=True, text=True,
                       timeout=120, preexec_fn=limit_file_size(100))
    assert p.returncode == 2 and f"{report}: report: cannot write: File too large" in p.stderr, p.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_report_path_taken_by_something_else_is_left_alone(tmp_path, small_trace):
    (tmp_path / "r.json.tmp").mkdir()  # not the report's to remove
    p = run("diff", small_trace, small_trace, "--report", tmp_path / "r.json")
    assert p.returncode == 2 and "r.json: report: cannot write" in p.stderr, p.stderr
    assert (tmp_path / "r.json.tmp").is_dir() and not (tmp_path / "r.json").exists()


def test_trace_whose_rows_cannot_be_read(tmp_path):
    """Metadata that loads over rows that do not: a gzip chunk of one stack overwritten. diff reads
    rows on a thread of its own (diff/pair_reader.hpp); the error still reaches the CLI: exit 2,
    naming the file and the dataset, and nothing of HDF5's own printing."""
    model, good, bad = tmp_path / "m.gguf", tmp_path / "good.h5", tmp_path / "bad.h5"
    assert run("fixture", "--n-layer", 2, "-o", model).returncode == 0
    for trace in (good, bad):
        p = run("run", "-m", model, "--tokens", "1,2,3", "-n", 2, "--compress", "-o", trace)
        assert p.returncode == 0, p.stderr
    with h5py.File(bad, "r") as f:
        chunk = f["taps/ffn_up/data"].id.get_chunk_info(0)
    with open(bad, "r+b") as f:
        f.seek(chunk.byte_offset)
        f.write(b"\xff" * chunk.size)
    p = run("diff", good, bad)
    assert p.returncode == 2, p.stderr
    assert f"{bad}: /taps/ffn_up/data" in p.stderr and "cannot read" in p.stderr, p.stderr
    assert "HDF5-DIAG" not in p.stderr, "HDF5's own error printing is on in the reading thread"


def test_a_compressed_copy_left_by_a_killed_run_is_removed_by_the_next(tmp_path, small_trace):
    """A run killed while it compressed its trace leaves the copy it was writing, named by its
    host and process id: the next --compress of that path removes this host's copies of processes
    that are gone, untouched for a minute, and leaves every other copy alone."""
    model, trace = small_trace.parent / "m.gguf", tmp_path / "t.h5"
    gone = subprocess.Popen(["true"])
    gone.wait()
    host = socket.gethostname()
    abandoned = tmp_path / f"t.h5.gzip-{host}-{gone.pid}.tmp"
    live = tmp_path / f"t.h5.gzip-{host}-{os.getpid()}.tmp"
    other = tmp_path / f"other.h5.gzip-{host}-{gone.pid}.tmp"
    elsewhere = tmp_path / f"t.h5.gzip-another-host-{gone.pid}.tmp"  # another host's process on a shared disk
    # Written a moment ago, by a process no PID here can be (above Linux's largest pid_max, 2^22):
    # maybe one of another PID namespace.
    recent = tmp_path / f"t.h5.gzip-{host}-{2**22 + 7}.tmp"
    for leftover in (abandoned, live, other, elsewhere, recent):
        leftover.write_bytes(b"partial copy")
    minute_ago = time.time() - 120
    for leftover in (abandoned, live, other, elsewhere):
        os.utime(leftover, (minute_ago, minute_ago))
    p = run("run", "-m", model, "--tokens", "1,2,3", "-n", 2, "--compress", "-o", trace)
    assert p.returncode == 0, p.stderr
    assert not abandoned.exists() and live.exists() and other.exists() and elsewhere.exists() and recent.exists()
    with h5py.File(trace, "r") as f:
        assert f.attrs["complete"] == 1


def test_taps_globs_that_select_weight_taps_need_weights(tmp_path, small_trace):
    """With --weights a --taps glob may name weight taps (weight.<tensor>); without it such a glob
    selects nothing and is refused like any other."""
    model = small_trace.parent / "m.gguf"
    for glob in ("*.weight", "weight.*", "blk.0.*,*attn_q.weight"):
        out = tmp_path / "w.h5"
        p = run("run", "-m", model, "--tokens", "1,2,3", "-n", 1, "--weights", "full", "--taps", glob, "-o", out)
        assert p.returncode == 0, (glob, p.stderr)
        with h5py.File(out, "r") as f:
            assert any(name.startswith("weight.") for name in f["taps"]), (glob, list(f["taps"]))
    p = run("run", "-m", model, "--tokens", "1,2,3", "-n", 1, "--taps", "weight.*", "-o", tmp_path / "x.h5")
    assert p.returncode == 2 and "--taps: 'weight.*' matches no tap" in p.stderr, p.stderr
