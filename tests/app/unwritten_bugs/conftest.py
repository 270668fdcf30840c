"""The fixture models every file of unwritten_bugs/ starts from, built once per process."""
import pytest

from bug_traces import PROMPT, run, traced


@pytest.fixture(scope="session")
def llama(tmp_path_factory):
    d = tmp_path_factory.mktemp("llama")
    model = d / "llama.gguf"
    assert run("fixture", "--arch", "llama", "--type", "F32", "--seed", 3, "-o", model).returncode == 0
    for backend, out, extra in (("reference", "ref.h5", []), ("host", "eng.h5", []),
                                ("host", "attn-scale.h5", ["--inject", "attn-scale"])):
        p = run("run", "--backend", backend, "-m", model, "--tokens", PROMPT, "-n", 6, *extra, "-o", d / out)
        assert p.returncode == 0, p.stderr
    return d


@pytest.fixture(scope="session")
def gemma2(tmp_path_factory):
    """gemma2: scores capped at 1, logits at 2, layer 0 slides a window of 4, layer 1 attends to all."""
    d = tmp_path_factory.mktemp("gemma2")
    traced(d, "gemma2", "--arch", "gemma2")
    return d
