"""The CUDA executor is a module (libtapdiff_cuda.so) that tapdiff loads only when a command asks
for --backend cuda: every other command starts without mapping cuBLAS. The dynamic loader's own
log (LD_DEBUG=files) says which libraries a process opened, and from where."""
import os
import shutil
import subprocess

import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
MODULE = os.path.join(os.environ["TAPDIFF_BUILD_DIR"], "engine", "libtapdiff_cuda.so")


def loader_log(tapdiff, *args, cwd=None):
    """Runs tapdiff with the loader's log on: (process, the log's lines naming opened files)."""
    p = subprocess.run([str(tapdiff), *map(str, args)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "LD_DEBUG": "files"}, cwd=cwd)
    opened = [l for l in p.stderr.splitlines() if "file=" in l and ("needed by" in l or "dynamically loaded" in l)]
    return p, opened


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.gguf"
    subprocess.run([TAPDIFF, "fixture", "-o", path], check=True, capture_output=True)
    return path


def needs_cuda_build():
    if not os.path.exists(MODULE):
        pytest.skip(f"no CUDA build here: {MODULE} is absent (nvcc absent at configure time)")


@pytest.mark.parametrize("command", [["--version"], ["run", "--backend", "host", "--tokens", "1,2", "-n", "2"],
                                     ["inspect"]])
def test_commands_without_cuda_do_not_load_cublas(model, tmp_path, command):
    args = list(command)
    if command[0] == "run":
        args += ["-m", model, "-o", tmp_path / "t.h5"]
    if command[0] == "inspect":
        subprocess.run([TAPDIFF, "run", "-m", model, "--tokens", "1,2", "-n", "2", "-o", tmp_path / "t.h5"],
                       check=True, capture_output=True)
        args += [tmp_path / "t.h5"]
    p, opened = loader_log(TAPDIFF, *args)
    assert p.returncode == 0, p.stderr[-2000:]
    assert opened, "LD_DEBUG=files logged no library: the check below would prove nothing"
    assert not [l for l in opened if "libcublas" in l or "libcudart" in l or "libtapdiff_cuda" in l], opened


def test_backend_cuda_loads_the_module_and_cublas_then_runs(model, tmp_path):
    needs_cuda_build()
    p, opened = loader_log(TAPDIFF, "run", "--backend", "cuda", "-m", model, "--tokens", "1,2", "-n", "2",
                           "-o", tmp_path / "t.h5")
    assert p.returncode == 0, p.stderr[-2000:]
    assert any(MODULE in l and "dynamically loaded" in l for l in opened), opened
    assert any("libcublas.so" in l for l in opened), opened
    assert p.stdout.startswith("tokens: 1,2,")


def test_an_installed_tapdiff_loads_the_module_installed_beside_it(model, tmp_path):
    """<prefix>/bin/tapdiff loads <prefix>/lib/tapdiff/libtapdiff_cuda.so, not the build tree's."""
    needs_cuda_build()
    (tmp_path / "bin").mkdir()
    (tmp_path / "lib" / "tapdiff").mkdir(parents=True)
    installed = shutil.copy(TAPDIFF, tmp_path / "bin" / "tapdiff")
    beside = shutil.copy(MODULE, tmp_path / "lib" / "tapdiff")
    p, opened = loader_log(installed, "run", "--backend", "cuda", "-m", model, "--tokens", "1,2", "-n", "2",
                           "-o", tmp_path / "t.h5")
    assert p.returncode == 0, p.stderr[-2000:]
    loaded = [l for l in opened if "libtapdiff_cuda" in l]
    assert loaded and all(str(beside) in l for l in loaded), loaded


def test_without_the_cuda_libraries_backend_cuda_says_why_and_runs_on_the_host(model, tmp_path):
    """A CUDA build on a machine without libcudart/libcuBLAS: the module cannot load, the reason
    says so, and the run goes on on the host executor. The libraries' folder is hidden by an
    empty folder mounted over it, in a mount namespace of this test's own."""
    needs_cuda_build()
    ldd = subprocess.run(["ldd", MODULE], capture_output=True, text=True, check=True).stdout
    cudart = [l.split()[2] for l in ldd.splitlines() if "libcudart" in l and "=>" in l]
    assert cudart and os.path.isabs(cudart[0]), ldd
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m (a mount namespace, to hide the CUDA libraries) is refused here: {probe.stderr.strip()}")
    (tmp_path / "empty").mkdir()
    script = (f'mount --bind "{tmp_path / "empty"}" "{os.path.dirname(cudart[0])}" && exec "{TAPDIFF}" run '
              f'--backend cuda -m "{model}" --tokens 1,2 -n 2 -o "{tmp_path / "t.h5"}"')
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "loading the CUDA executor's module: libcudart" in p.stderr and "running the host executor" in p.stderr, p.stderr
    assert p.stdout.startswith("tokens: 1,2,")
