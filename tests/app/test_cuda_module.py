"""The CUDA executor is a module (libtapdiff_cuda.so) that tapdiff loads only when a command asks
for --backend cuda: every other command starts without mapping cuBLAS. The dynamic loader's own
log (LD_DEBUG=files) says which libraries a process opened, and from where."""
import os
import shutil
import subprocess

import pytest

from cuda_module_log import assert_the_module_ran, fell_back_because, run_logged

TAPDIFF = os.environ["TAPDIFF_BIN"]
BUILD_DIR = os.environ["TAPDIFF_BUILD_DIR"]
MODULE = os.path.join(BUILD_DIR, "engine", "libtapdiff_cuda.so")


def run_cuda(tapdiff, model, tmp_path, wrap=()):
    return run_logged([*wrap, tapdiff, "run", "--backend", "cuda", "-m", model, "--tokens", "1,2", "-n", "2",
                       "-o", tmp_path / "c.h5"])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "m.gguf"
    subprocess.run([TAPDIFF, "fixture", "-o", path], check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """tapdiff as `cmake --install --component cli` lays it out: bin/tapdiff, lib/tapdiff/ the module."""
    prefix = tmp_path_factory.mktemp("prefix")
    subprocess.run([os.environ["CMAKE_COMMAND"], "--install", BUILD_DIR, "--component", "cli", "--prefix", prefix],
                   check=True, capture_output=True)
    return prefix


def needs_cuda_build():
    if not os.path.exists(MODULE):
        pytest.skip(f"no CUDA build here: {MODULE} is absent (nvcc absent at configure time)")


def needs_mount_namespace():
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m (a mount namespace, to hide system files from tapdiff) is refused here: "
                    f"{probe.stderr.strip()}")


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
    p, opened = run_logged([TAPDIFF, *args])
    assert p.returncode == 0, p.stderr[-2000:]
    assert opened, "LD_DEBUG=files logged no library: the check below would prove nothing"
    assert not [l for l in opened if "libcublas" in l or "libcudart" in l or "libtapdiff_cuda" in l], opened


def test_backend_cuda_loads_the_module_and_runs_it(model, tmp_path):
    needs_cuda_build()
    p, opened = run_cuda(TAPDIFF, model, tmp_path)
    assert any(MODULE in l and "dynamically loaded" in l for l in opened), opened
    assert_the_module_ran(p)


def test_an_installed_tapdiff_runs_the_module_installed_beside_it(installed, model, tmp_path):
    """<prefix>/bin/tapdiff loads <prefix>/lib/tapdiff/libtapdiff_cuda.so, not the build tree's, and the
    module finds the CUDA libraries without the loader's cache (/etc/ld.so.cache hidden): by its
    RUNPATH, as a machine whose ld.so.conf does not name the toolkit would need."""
    needs_cuda_build()
    p, opened = run_cuda(installed / "bin" / "tapdiff", model, tmp_path)
    loaded = [l for l in opened if "libtapdiff_cuda" in l]
    assert loaded and all(str(installed / "lib" / "tapdiff") in l for l in loaded), loaded
    assert_the_module_ran(p)
    needs_mount_namespace()
    (tmp_path / "empty").write_bytes(b"")
    hide_cache = ["unshare", "-m", "sh", "-c", f'mount --bind "{tmp_path / "empty"}" /etc/ld.so.cache && exec "$@"', "sh"]
    assert_the_module_ran(run_cuda(installed / "bin" / "tapdiff", model, tmp_path, wrap=hide_cache)[0])


def test_a_tapdiff_copied_out_of_the_build_tree_does_not_load_its_module(model, tmp_path):
    needs_cuda_build()
    (tmp_path / "bin").mkdir()
    copied = shutil.copy(TAPDIFF, tmp_path / "bin" / "tapdiff")
    p, _ = run_cuda(copied, model, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert f"libtapdiff_cuda.so is not in {tmp_path / 'lib' / 'tapdiff'}" in (fell_back_because(p) or ""), p.stderr


def test_a_module_built_from_other_headers_is_refused(installed, model, tmp_path):
    """The module's interface tag (a hash of the headers it compiled) differs from the program's:
    tapdiff says so and runs on the host rather than call into another Executor layout."""
    needs_cuda_build()
    prefix = tmp_path / "prefix"
    shutil.copytree(installed, prefix)
    module = prefix / "lib" / "tapdiff" / "libtapdiff_cuda.so"
    tag = open(os.path.join(BUILD_DIR, "engine", "generated", "cuda_module_tag.hpp")).read().split('"')[1].encode()
    data = module.read_bytes()
    assert data.count(tag) == 1, "the module should hold its tag once"
    other = bytes(b"0123456789abcdef"[(b"0123456789abcdef".index(c) + 1) % 16] for c in tag)
    module.write_bytes(data.replace(tag, other))
    p, _ = run_cuda(prefix / "bin" / "tapdiff", model, tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    why = fell_back_because(p) or ""
    assert "was built from other engine headers than this program" in why and other.decode() in why, p.stderr


def test_without_the_cuda_libraries_backend_cuda_says_why_and_runs_on_the_host(model, tmp_path):
    """A CUDA build on a machine without libcudart/libcuBLAS: the module cannot load, the reason
    says so, and the run goes on on the host executor. The libraries' folder is hidden by an
    empty folder mounted over it, in a mount namespace of this test's own."""
    needs_cuda_build()
    needs_mount_namespace()
    ldd = subprocess.run(["ldd", MODULE], capture_output=True, text=True, check=True).stdout
    cudart = [l.split()[2] for l in ldd.splitlines() if "libcudart" in l and "=>" in l]
    assert cudart and os.path.isabs(cudart[0]), ldd
    (tmp_path / "empty").mkdir()
    hide = ["unshare", "-m", "sh", "-c", f'mount --bind "{tmp_path / "empty"}" "{os.path.dirname(cudart[0])}" && exec "$@"',
            "sh"]
    p, _ = run_cuda(TAPDIFF, model, tmp_path, wrap=hide)
    assert p.returncode == 0 and p.stdout.startswith("tokens: 1,2,"), p.stderr[-2000:]
    assert "loading the CUDA executor's module: libcudart" in (fell_back_because(p) or ""), p.stderr
