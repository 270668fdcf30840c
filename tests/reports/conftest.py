"""Fixtures of the report tests: every sample report, written once per test module."""
import os
import pathlib
import subprocess

import pytest

SAMPLES = ("passing", "diverged", "incompatible", "hostile")


@pytest.fixture(scope="module")
def out(request) -> pathlib.Path:
    """Runs test_reports_write into $TAPDIFF_REPORTS_OUT/<module> and returns that folder."""
    folder = pathlib.Path(os.environ["TAPDIFF_REPORTS_OUT"]) / request.module.__name__
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([os.environ["TAPDIFF_REPORTS_WRITE"], str(folder)], check=True, timeout=60)
    return folder
