"""The HTML report rendered by headless Chromium: a screenshot is produced and the DOM holds
the first divergence. Fails (never skips) without Chromium: scripts/bootstrap.sh installs it."""
import os
import shutil
import struct
import subprocess

import pytest

WIDTH, HEIGHT = 1280, 2000


def chromium():
    for name in (os.environ.get("TAPDIFF_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    pytest.fail("headless Chromium not found: install Debian's 'chromium' package "
                "(scripts/bootstrap.sh installs it) or set TAPDIFF_CHROMIUM to its path")


def run_chromium(tmp_path, *args):
    profile = tmp_path / "profile"
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={profile}", *args]
    env = dict(os.environ, HOME=str(tmp_path))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env)
    assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stderr[-2000:]}"
    return done.stdout


def test_screenshot_is_produced(out, tmp_path):
    png = out / "diverged.png"
    png.unlink(missing_ok=True)
    run_chromium(tmp_path, f"--screenshot={png}", f"--window-size={WIDTH},{HEIGHT}",
                 (out / "diverged.html").as_uri())
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT)
    # A blank or unstyled page compresses to a few KB; the report is far above that.
    assert len(data) > 60_000, f"suspiciously small screenshot: {len(data)} bytes"


def test_dom_holds_first_divergence(out, tmp_path):
    dom = run_chromium(tmp_path, "--dump-dom", (out / "diverged.html").as_uri())
    assert '<div class="headline">blk.0.attn.probs at position 8</div>' in dom
    assert '<code class="tap">blk.0.attn.probs</code> at position <b>8</b>' in dom
    assert dom.count('<svg class="heatmap"') == 2


def test_dom_keeps_hostile_names_as_text(out, tmp_path):
    dom = run_chromium(tmp_path, "--dump-dom", (out / "hostile.html").as_uri())
    assert "<script" not in dom
    assert "blk.1.attn_q&lt;&amp;&gt;\"'" in dom
