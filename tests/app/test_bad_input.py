"""Bad input at the CLI: exit 2 and a message naming the file (or option), the field and what
was expected. Files that claim more than they hold (a GGUF tensor of 10^12 elements, in a sparse
file really large enough to hold it; traces of 10^9 positions) are refused before anything is
allocated for the claim: the peak memory stays small."""
import os
import resource
import struct
import subprocess

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


def test_unwritable_outputs(tmp_path, small_trace):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    model = small_trace.parent / "m.gguf"
    p = run("run", "-m", model, "--tokens", "1,2", "-o", not_a_dir / "t.h5")
    assert p.returncode == 2 and f"{not_a_dir / 't.h5'}: /: cannot create the trace" in p.stderr, p.stderr
    p = run("diff", small_trace, small_trace, "--report", not_a_dir / "r.html")
    assert p.returncode == 2 and f"{not_a_dir / 'r.html'}: report: cannot write" in p.stderr, p.stderr


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
