"""The commit a build names (cmake/GitCommit.cmake): read at build time, -dirty with local
changes, rewritten only when it changes; --version and every trace carry it."""
import json
import os
import subprocess

import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
SOURCE_DIR = os.environ["TAPDIFF_SOURCE_DIR"]
CMAKE = os.environ["CMAKE_COMMAND"]
SCRIPT = os.path.join(SOURCE_DIR, "cmake", "GitCommit.cmake")


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def written_commit(source, output):
    subprocess.run([CMAKE, f"-DSOURCE_DIR={source}", f"-DOUTPUT={output}", "-P", SCRIPT], check=True)
    text = output.read_text()
    return text[text.index('return "') + len('return "'):text.index('";')]


def test_head_then_dirty_then_the_next_commit(tmp_path):
    repo, out = tmp_path / "repo", tmp_path / "git_commit.cpp"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "engine.cpp").write_text("int a;\n")
    git(repo, "add", "engine.cpp")
    git(repo, "commit", "-qm", "first")
    first = git(repo, "rev-parse", "--short=12", "HEAD")
    assert written_commit(repo, out) == first

    os.utime(out, (1, 1))  # unchanged: not rewritten, so nothing recompiles
    assert written_commit(repo, out) == first and out.stat().st_mtime == 1

    (repo / "notes.txt").write_text("untracked files do not make a build dirty\n")
    assert written_commit(repo, out) == first
    (repo / "engine.cpp").write_text("int b;\n")
    assert written_commit(repo, out) == first + "-dirty"

    git(repo, "commit", "-qam", "second")
    second = git(repo, "rev-parse", "--short=12", "HEAD")
    assert second != first and written_commit(repo, out) == second


def test_outside_a_checkout_it_is_unknown(tmp_path):
    (tmp_path / "src").mkdir()
    assert written_commit(tmp_path / "src", tmp_path / "git_commit.cpp") == "unknown"


def test_version_and_traces_name_the_commit_that_was_built(tmp_path):
    try:
        head = git(SOURCE_DIR, "rev-parse", "--short=12", "HEAD")
    except subprocess.CalledProcessError:
        pytest.skip(f"{SOURCE_DIR} is not a git checkout")
    dirty = git(SOURCE_DIR, "status", "--porcelain", "--untracked-files=no") != ""
    expected = head + ("-dirty" if dirty else "")
    version = subprocess.run([TAPDIFF, "--version"], capture_output=True, text=True, check=True).stdout
    assert version.strip().endswith(f"({expected})"), version

    model, trace = tmp_path / "tiny.gguf", tmp_path / "run.h5"
    subprocess.run([TAPDIFF, "fixture", "-o", model], capture_output=True, check=True)
    subprocess.run([TAPDIFF, "run", "-m", model, "--tokens", "1,2,3", "-n", "1", "-o", trace],
                   capture_output=True, check=True)
    info = json.loads(subprocess.run([TAPDIFF, "inspect", "--json", trace], capture_output=True, text=True,
                                     check=True).stdout)
    assert info["producer"]["git_commit"] == expected
