"""What the CUDA module's tests share: a run with the dynamic loader's log on, and what tapdiff
said about the device."""
import os
import subprocess


def run_logged(args, env=None):
    """Runs args with LD_DEBUG=files: (process, the log's lines naming the files it opened)."""
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300,
                       env={**(env or os.environ), "LD_DEBUG": "files"})
    opened = [l for l in p.stderr.splitlines() if "file=" in l and ("needed by" in l or "dynamically loaded" in l)]
    return p, opened


def fell_back_because(p):
    """The reason tapdiff gave for running the host executor, or None when it ran on a device."""
    line = [l for l in p.stderr.splitlines() if "running the host executor instead" in l]
    return line[0] if line else None


def assert_the_module_ran(p):
    """Either a device ran the executor, or the module's own device check said why not: its reasons
    name the CUDA call that failed, the loader's name the module."""
    assert p.returncode == 0 and p.stdout.startswith("tokens: 1,2,"), p.stderr[-2000:]
    why = fell_back_because(p)
    assert why is None or "cudaGetDeviceCount:" in why or "cublasCreate:" in why, why
