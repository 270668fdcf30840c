"""tapdiff bisect on a throwaway git repository whose commit K introduces a numerical bug.

The repository's "engine build" (build.sh) writes out/tapdiff, a wrapper that runs the real
tapdiff with the fault named in the commit's fault.txt; commit BROKEN does not build. The
check runs out/tapdiff against a golden trace recorded by the clean engine.
"""
import json
import os
import signal
import subprocess
import time

import pytest

TAPDIFF = os.environ["TAPDIFF_BIN"]
N, K, BROKEN = 8, 6, 4  # commits c1..c8 on top of the good c0; git's first midpoint is c4
K_SUBJECT = "engine: softmax scale 1/d"

BUILD_SH = r"""#!/bin/sh
set -e
if [ -e BROKEN ]; then echo "engine.c:12: error: expected ';'" >&2; exit 1; fi
mkdir -p out
fault=$(cat fault.txt)
printf '#!/bin/sh\nexec "%s" "$@" %s\n' "$TAPDIFF_BIN" "${fault:+--inject $fault}" > out/tapdiff
chmod +x out/tapdiff
"""


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo, subject):
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", subject)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """(repo, golden, shas): c0 good, c4 does not build, c6 brings the attn-scale bug."""
    d = tmp_path_factory.mktemp("bisect")
    model, golden = d / "m.gguf", d / "golden.h5"
    subprocess.run([TAPDIFF, "fixture", "--arch", "llama", "--seed", "3", "-o", model], check=True, capture_output=True)
    subprocess.run([TAPDIFF, "run", "--backend", "host", "-m", model, "--tokens", "1,70,200,33", "-n", "2",
                    "-o", golden], check=True, capture_output=True)
    repo = d / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "build.sh").write_text(BUILD_SH)
    (repo / "fault.txt").write_text("")
    (repo / "notes.txt").write_text("0\n")
    shas = [commit(repo, "c0: the engine")]
    for i in range(1, N + 1):
        (repo / "notes.txt").write_text(f"{i}\n")
        subject = f"c{i}: notes"
        if i == BROKEN:
            (repo / "BROKEN").write_text("")
            subject = f"c{i}: half-done refactor (does not build)"
        if i == BROKEN + 1:
            (repo / "BROKEN").unlink()
        if i == K:
            (repo / "fault.txt").write_text("attn-scale")
            subject = K_SUBJECT
        shas.append(commit(repo, subject))
    return repo, golden, shas


def user_state(repo):
    """Everything of the user's repository that bisect must leave alone."""
    git_dir = repo / ".git"
    return {
        "head": git(repo, "symbolic-ref", "HEAD"),
        "sha": git(repo, "rev-parse", "HEAD"),
        "status": git(repo, "status", "--porcelain"),
        "staged": git(repo, "diff", "--cached"),
        "unstaged": git(repo, "diff"),
        "refs": git(repo, "for-each-ref"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "bisecting": sorted(p.name for p in git_dir.iterdir() if p.name.startswith("BISECT")),
        "files": {p.name: p.read_bytes() for p in repo.iterdir() if p.is_file()},
    }


def dirty(repo):
    (repo / "notes.txt").write_text("uncommitted edit\n")
    (repo / "staged.txt").write_text("staged\n")
    git(repo, "add", "staged.txt")
    (repo / "untracked.txt").write_text("untracked\n")


def bisect(repo, golden, tmpdir, *extra, build="sh build.sh", popen=False):
    args = [TAPDIFF, "bisect", "-C", str(repo), "--good", "HEAD~8", "--bad", "main", "--build", build,
            "--tapdiff", "out/tapdiff", *extra, "--check", "--golden", str(golden)]
    env = dict(os.environ, TMPDIR=str(tmpdir), TAPDIFF_BIN=TAPDIFF)
    tmpdir.mkdir(exist_ok=True)
    if popen:
        return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)


def test_bisect_names_commit_k_skips_the_unbuildable_one_and_leaves_the_repo_alone(history, tmp_path):
    repo, golden, shas = history
    dirty(repo)
    before = user_state(repo)
    p = bisect(repo, golden, tmp_path / "tmp", "--format", "md")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"first bad commit: {shas[K]} {K_SUBJECT}" in p.stdout
    assert f"parent:           {shas[K - 1]} c{K - 1}: notes" in p.stdout
    tested = p.stdout.split("tested:\n")[1].split("\n\n")[0]
    assert f"{shas[BROKEN][:12]} skip" in tested
    assert f"{shas[K][:12]} bad" in tested or shas[K] == shas[-1]
    assert "build failed" in p.stderr
    # The divergence report of commit K against its parent: the attention-scale bug.
    report = p.stdout.split(f"divergence of {shas[K][:12]} against its parent {shas[K - 1][:12]}:")[1]
    assert "DIVERGED" in report and "attention-scale" in report
    assert user_state(repo) == before
    assert list((tmp_path / "tmp").iterdir()) == []


def test_bisect_with_a_repro_replays_it_at_every_commit(history, tmp_path):
    """--repro DIR: each step runs `tapdiff replay DIR` (no model, no check), the same commit K."""
    repo, golden, shas = history
    model = golden.parent / "m.gguf"
    faulty = tmp_path / "faulty.h5"
    subprocess.run([TAPDIFF, "run", "--backend", "host", "-m", model, "--tokens", "1,70,200,33", "-n", "2",
                    "--inject", "attn-scale", "-o", faulty], check=True, capture_output=True)
    repro = tmp_path / "repro"
    subprocess.run([TAPDIFF, "repro", golden, faulty, "-o", repro], check=True, capture_output=True)
    # The bug lives in the code under bisection (each commit's build), not in the repro's settings.
    manifest = json.loads((repro / "repro.json").read_text())
    manifest["engine"]["fault"] = ""
    (repro / "repro.json").write_text(json.dumps(manifest))
    before = user_state(repo)
    env = dict(os.environ, TMPDIR=str(tmp_path), TAPDIFF_BIN=TAPDIFF)
    p = subprocess.run([TAPDIFF, "bisect", "-C", str(repo), "--good", "HEAD~8", "--bad", "main", "--build",
                        "sh build.sh", "--tapdiff", "out/tapdiff", "--repro", str(repro)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"first bad commit: {shas[K]} {K_SUBJECT}" in p.stdout
    assert f"replay at {shas[K][:12]}:\nREPRODUCED blk.0.attn.probs @ 1 · attention-scale" in p.stdout
    assert user_state(repo) == before
    p = subprocess.run([TAPDIFF, "bisect", "-C", str(repo), "--good", "HEAD~1", "--bad", "main", "--repro",
                        str(tmp_path), "--check", "--golden", str(golden)], capture_output=True, text=True)
    assert p.returncode == 2 and "--repro" in p.stderr


def test_no_commit_builds_exits_125_with_the_candidates(history, tmp_path):
    repo, golden, shas = history
    before = user_state(repo)
    p = bisect(repo, golden, tmp_path / "tmp", build="exit 1")
    assert p.returncode == 125, p.stdout + p.stderr
    assert "only skipped commits are left" in p.stdout
    candidates = p.stdout.split("it is one of\n")[1].split("tested:")[0]
    assert shas[K] in candidates and shas[1] in candidates
    assert not any(line.startswith("first bad commit:") for line in p.stdout.splitlines())
    assert user_state(repo) == before
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.parametrize("build", [
    "touch {started}; sleep 60",
    "trap '' INT; touch {started}; sleep 60",  # ignores SIGINT, as its children do: killed 5 s later
], ids=["build-stops", "build-ignores-sigint"])
def test_interrupt_removes_the_worktree(history, tmp_path, build):
    repo, golden, _ = history
    before = user_state(repo)
    started = tmp_path / "started"
    p = bisect(repo, golden, tmp_path / "tmp", build=build.format(started=started), popen=True)
    deadline = time.time() + 60
    while not started.exists() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    assert started.exists(), p.communicate()
    sent = time.time()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGINT, out + err
    assert time.time() - sent < 20, "the build outlived the interrupt"
    assert "interrupted" in err and "worktree was removed" in err
    assert user_state(repo) == before
    assert list((tmp_path / "tmp").iterdir()) == []


def test_bad_input_exits_2_without_a_worktree(history, tmp_path):
    repo, golden, _ = history
    before = user_state(repo)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    p = subprocess.run([TAPDIFF, "bisect", "-C", str(repo), "--good", "no-such-rev", "--bad", "main"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "--good no-such-rev: not a commit" in p.stderr
    p = subprocess.run([TAPDIFF, "bisect", "-C", str(tmp_path), "--good", "a", "--bad", "b"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2 and str(tmp_path) in p.stderr
    p = subprocess.run([TAPDIFF, "bisect", "-C", str(repo), "--good", "HEAD~1", "--bad", "main", "--check",
                        "--golden", str(golden), "--keep-traces", "x"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "--keep-traces" in p.stderr
    assert user_state(repo) == before
    assert list(tmp_path.iterdir()) == []
