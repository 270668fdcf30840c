"""tapdiff's dequantization against an independent oracle: the PyPI `gguf` package.

gguf_dequant_dump (tests/model/tools) writes a fixture GGUF with, for every type tapdiff
supports, T: src.T (F32 input), q.T (src.T through tapdiff's quantizer) and raw.T (random
block bytes, float fields forced finite). It then dequantizes every tensor with tapdiff's
dequantize_tensor. This test reads the same file with gguf.GGUFReader, dequantizes the raw
bytes with gguf.quants.dequantize and requires the floats to be identical.

Tolerance: none, bit-exact. Both sides evaluate the same float32 expressions in the same order
from exactly representable inputs (fp16/bf16 -> f32 is exact; small integers are exact):
    legacy      d * (q - z)        and  d * q + m
    Q4_K, Q5_K  (d * sc) * q - (dmin * m)
    Q6_K        (d * sc) * (q - 32)
each operation rounded once, to nearest even. A 1-ulp difference therefore means a different
expression (or FMA contraction enabled in the C++ build), which the reference must not have.
"""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

# Deliberately unguarded: without the `gguf` package this test must fail, not skip.
import gguf
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize

# The types tapdiff supported when this test was written; the fixture's own list (written
# from kGgmlTypes) must contain at least these.
BASELINE_TYPES = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                  "Q4_K", "Q5_K", "Q6_K"}

# Types whose gguf-py quantizer is ggml's reference algorithm, which tapdiff's encoders follow
# step for step, so the bytes must agree. Not the k-quants: gguf-py has no encoder for them,
# and tapdiff's is deliberately simpler than llama.cpp's search.
SAME_ENCODER_TYPES = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}


def run_tool(*args: object) -> subprocess.CompletedProcess:
    tool = os.environ.get("TAPDIFF_DEQUANT_DUMP")
    assert tool, "TAPDIFF_DEQUANT_DUMP must name the gguf_dequant_dump binary (ctest sets it)"
    assert Path(tool).is_file(), f"TAPDIFF_DEQUANT_DUMP={tool} does not exist"
    return subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=120)


def run_ok(*args: object) -> None:
    r = run_tool(*args)
    assert r.returncode == 0, f"gguf_dequant_dump {args} exited {r.returncode}:\n{r.stderr}"


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dequant_oracle")
    path, ours = tmp / "fixture.gguf", tmp / "ours"
    run_ok("write-fixture", path)
    run_ok("dequant", path, ours)
    reader = GGUFReader(path)
    types = reader.fields["tapdiff.fixture.types"].contents()
    return reader, ours, types


def expected_tensors(types: list[str]) -> dict[str, tuple[GGMLQuantizationType, list[int]]]:
    """name -> (type, ne) as the fixture's header comment in gguf_dequant_dump.cpp states."""
    out = {}
    for name in types:
        qtype = GGMLQuantizationType[name]
        block, _ = gguf.GGML_QUANT_SIZES[qtype]
        chunk = max(32, block)
        out[f"src.{name}"] = (GGMLQuantizationType.F32, [2 * chunk, 4])
        out[f"q.{name}"] = (qtype, [2 * chunk, 4])
        out[f"raw.{name}"] = (qtype, [2 * chunk, 2])
    return out


def ours_for(ours: Path, name: str) -> np.ndarray:
    return np.fromfile(ours / f"{name}.f32", dtype="<f4")


def test_every_supported_type_is_covered(fixture):
    _, _, types = fixture
    assert len(types) == len(set(types)), f"duplicate type names: {types}"
    missing = BASELINE_TYPES - set(types)
    assert not missing, f"tapdiff's type list lost {sorted(missing)}"
    # A new type in kGgmlTypes lands in the fixture automatically; it must be one gguf-py
    # knows, or the comparison below cannot cover it.
    unknown = [t for t in types if t not in GGMLQuantizationType.__members__]
    assert not unknown, f"types without a gguf-py counterpart: {unknown}"


def test_gguf_py_sees_our_names_types_and_shapes(fixture):
    reader, ours, types = fixture
    seen = {t.name: (t.tensor_type, [int(n) for n in t.shape]) for t in reader.tensors}
    assert seen == expected_tensors(types)
    assert sorted(p.stem for p in ours.glob("*.f32")) == sorted(seen)
    for t in reader.tensors:
        assert ours_for(ours, t.name).size == t.n_elements, t.name


def test_dequantization_is_bit_identical_to_gguf_py(fixture):
    reader, ours, _ = fixture
    failures = []
    for t in reader.tensors:
        want = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32).ravel()
        got = ours_for(ours, t.name)
        assert got.shape == want.shape, t.name
        assert np.isfinite(want).all() or t.name.startswith("raw."), t.name
        diff = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        if diff.size:
            i = diff[0]
            failures.append(f"{t.name} ({t.tensor_type.name}): {diff.size} of {got.size} differ, "
                            f"first at {i}: ours {got[i]!r}, gguf-py {want[i]!r}")
    assert not failures, "\n".join(failures)


def test_legacy_encoders_match_gguf_py_bytes(fixture):
    reader, _, types = fixture
    by_name = {t.name: t for t in reader.tensors}
    checked = 0
    for name in types:
        if name not in SAME_ENCODER_TYPES:
            continue
        src = by_name[f"src.{name}"].data.reshape(-1)
        want = np.asarray(quantize(src, GGMLQuantizationType[name])).view(np.uint8).ravel()
        got = np.asarray(by_name[f"q.{name}"].data).view(np.uint8).ravel()
        assert got.shape == want.shape, name
        diff = np.flatnonzero(got != want)
        assert diff.size == 0, f"{name}: {diff.size} bytes differ, first at byte {diff[0]}"
        checked += 1
    assert checked == len(SAME_ENCODER_TYPES)


@pytest.mark.parametrize("args", [[], ["dequant"], ["write-fixture"], ["frobnicate", "x"]])
def test_usage_errors_exit_2(args):
    r = run_tool(*args)
    assert r.returncode == 2
    assert "usage:" in r.stderr


def test_bad_gguf_exits_2(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOTGGUF" + bytes(64))
    r = run_tool("dequant", bad, tmp_path / "out")
    assert r.returncode == 2
    assert "bad.gguf" in r.stderr, r.stderr
