"""docs/ci.md: its GitHub Actions workflow parses, publishes the reports it says it does, and
every tapdiff command and option it runs exists in the CLI."""
import os
import re
import shlex
import subprocess
from pathlib import Path

import yaml

TAPDIFF = os.environ["TAPDIFF_BIN"]
DOC = Path(os.environ["TAPDIFF_SOURCE_DIR"]) / "docs" / "ci.md"


def workflow():
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/ci.md should hold exactly one yaml block: the workflow"
    return yaml.safe_load(blocks[0])


def steps(wf):
    return [step for job in wf["jobs"].values() for step in job["steps"]]


def tapdiff_commands(wf):
    """Each tapdiff invocation in the run: scripts, as its argument list after `tapdiff`."""
    commands = []
    for step in steps(wf):
        script = step.get("run", "").replace("\\\n", " ")
        for line in script.splitlines():
            for command in re.split(r"&&|\|\||;|\|", line):
                words = shlex.split(command)
                for i, word in enumerate(words):
                    if os.path.basename(word) == "tapdiff":
                        commands.append(words[i + 1:])
    return commands


def subcommand_path(args):
    path = [args[0]]
    if args[0] == "golden":
        path.append(args[1])
    return path


def test_the_workflow_parses_and_has_its_parts():
    wf = workflow()
    assert wf["name"] and wf["jobs"]
    assert True in wf or "on" in wf  # YAML 1.1 reads the key `on` as true
    runs = " ".join(s.get("run", "") for s in steps(wf))
    assert "cmake --build" in runs
    checks = [c for c in tapdiff_commands(wf) if c[0] == "check"]
    assert checks, "the workflow runs no `tapdiff check`"
    reports = [c[i + 1] for c in checks for i, w in enumerate(c) if w == "--report"]
    html = next(r for r in reports if r.endswith(".html"))
    xml = next(r for r in reports if r.endswith(".xml"))
    md = next(r for r in reports if r.endswith(".md"))
    uploads = [s for s in steps(wf) if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert any(s["with"]["path"] == html for s in uploads), "the HTML report is not uploaded"
    junit = [s for s in steps(wf) if "junit" in s.get("uses", "")]
    assert any(s["with"]["report_paths"] == xml for s in junit), "the JUnit report is not published"
    assert any(re.search(rf"cat {re.escape(md)} >> \"?\$GITHUB_STEP_SUMMARY", s.get("run", "")) for s in steps(wf)), \
        "the Markdown report does not go to the job summary"


def test_every_tapdiff_command_and_option_exists():
    commands = tapdiff_commands(workflow())
    assert len(commands) >= 2
    for args in commands:
        path = subcommand_path(args)
        p = subprocess.run([TAPDIFF, *path, "--help"], capture_output=True, text=True)
        assert p.returncode == 0, f"`tapdiff {' '.join(path)}` does not exist: {p.stderr}"
        for word in args[len(path):]:
            if word.startswith("-"):
                option = word.split("=")[0]
                assert re.search(rf"(^|[\s,]){re.escape(option)}\b", p.stdout, re.M), \
                    f"`tapdiff {' '.join(path)}` has no option {option}"
