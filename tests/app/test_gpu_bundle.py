"""scripts/gpu-bundle.sh: the CUDA build packed for a GPU machine without tapdiff's build
dependencies. Every library the programs load (but the C runtime and cuBLAS) comes from the
bundle, the programs start from it, and its runners refuse plainly where there is no GPU."""
import os
import re
import shutil
import subprocess
import tarfile

import pytest

from cuda_module_log import assert_the_module_ran, run_logged

SOURCE_DIR = os.environ["TAPDIFF_SOURCE_DIR"]
BUILD_DIR = os.environ["TAPDIFF_BUILD_DIR"]
SCRIPT = os.path.join(SOURCE_DIR, "scripts", "gpu-bundle.sh")
SYSTEM = re.compile(r"/(libc|libm|libdl|libpthread|librt|libresolv|libgcc_s|libstdc\+\+|libcublas|libcublasLt)\.so|ld-linux|vdso")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    if not os.path.exists(os.path.join(BUILD_DIR, "tests", "engine", "test_engine_cuda")):
        pytest.skip("no CUDA build here (nvcc absent at configure time)")
    work = tmp_path_factory.mktemp("bundle")
    archive = work / "tapdiff-gpu.tar.gz"
    p = subprocess.run([SCRIPT, BUILD_DIR, archive], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with tarfile.open(archive) as tar:
        tar.extractall(work)
    return work / "tapdiff-gpu"


def bundle_env(bundle):
    return {**os.environ, "LD_LIBRARY_PATH": str(bundle / "lib")}


@pytest.mark.parametrize("program", ["bin/tapdiff", "bin/test_engine_cuda", "bin/bench_engine",
                                     "lib/tapdiff/libtapdiff_cuda.so"])
def test_every_library_but_the_c_runtime_and_cublas_comes_from_the_bundle(bundle, program):
    lines = subprocess.run(["ldd", bundle / program], capture_output=True, text=True, check=True,
                           env=bundle_env(bundle)).stdout.splitlines()
    outside = [l.strip() for l in lines if not SYSTEM.search(l) and str(bundle / "lib") not in l]
    assert outside == [], f"{program} loads these from outside the bundle: {outside}"
    if program.startswith("bin/"):
        assert any("libhdf5" in l for l in lines) and any("libopenblas" in l for l in lines)
    else:
        assert any("libcudart" in l for l in lines) and any("libcublas.so" in l for l in lines)


def test_the_bundled_tapdiff_runs(bundle, tmp_path):
    env = bundle_env(bundle)
    subprocess.run([bundle / "bin" / "tapdiff", "fixture", "-o", tmp_path / "t.gguf"], check=True, env=env,
                   capture_output=True)
    p = subprocess.run([bundle / "bin" / "tapdiff", "run", "-m", tmp_path / "t.gguf", "--tokens", "1,2",
                        "-n", "2", "-o", tmp_path / "t.h5"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.startswith("tokens: 1,2,"), p.stderr
    # --backend cuda loads the bundle's module and runs it (without a GPU here, its reason, then the host).
    p, opened = run_logged([bundle / "bin" / "tapdiff", "run", "--backend", "cuda", "-m", tmp_path / "t.gguf",
                            "--tokens", "1,2", "-n", "2", "-o", tmp_path / "c.h5"], env=env)
    loaded = [l for l in opened if "libtapdiff_cuda.so" in l and "dynamically loaded" in l]
    assert loaded and all(str(bundle / "lib" / "tapdiff") in l for l in loaded), opened
    assert_the_module_ran(p)


@pytest.mark.parametrize("runner", ["run.sh", "run-7b.sh"])
def test_the_runners_without_a_gpu_say_so(bundle, tmp_path, runner):
    if shutil.which("nvidia-smi"):
        pytest.skip(f"nvidia-smi exists here: {runner} would run the whole device check")
    p = subprocess.run([bundle / runner, tmp_path / "out"], capture_output=True, text=True)
    assert p.returncode == 125 and "no GPU" in p.stderr, p.stderr


def test_a_build_without_cuda_is_refused(tmp_path):
    p = subprocess.run([SCRIPT, tmp_path, tmp_path / "x.tar.gz"], capture_output=True, text=True)
    assert p.returncode == 2 and f"{tmp_path}/app/tapdiff is missing" in p.stderr, p.stderr
    assert not (tmp_path / "x.tar.gz").exists()
