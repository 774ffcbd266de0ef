"""`logferry demo` at a reduced size: every line published is read back, all processes stop."""

import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_reads_back_everything_and_cleans_up(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "broker", "demo", "--seconds", "3", "--rate", "3000",
         "--workdir", str(tmp_path / "demo")],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    total = re.search(r"^total\s+([\d,]+)\s+([\d,]+)", out, re.M)
    assert total, out
    published, read = (int(x.replace(",", "")) for x in total.groups())
    assert published > 0 and published == read
    assert "every published line was read back" in out
    assert "stopped every process it started" in out
    leftover = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", "demo left processes running"
