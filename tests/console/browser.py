"""Helpers of the console tests: the console as a subprocess, and Debian's Chromium
driven by Playwright (which cannot download a browser of its own here)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("LOGFERRY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def require_chromium() -> str:
    """The Chromium binary, or a failure that says how to install it (never a silent skip)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the console's browser tests need Debian's chromium "
            "(scripts/install-system-deps.sh installs it: apt-get install chromium)"
        )
    return CHROMIUM


class ConsoleProcess:
    """``logferry console --zk ... --port 0`` as a subprocess; :attr:`url` once it serves."""

    def __init__(self, *zk: str, interval: float = 1.0, extra: list[str] | None = None):
        argv = [sys.executable, "-m", "broker", "console", "--port", "0", "--interval", str(interval)]
        for z in zk:
            argv += ["--zk", z]
        argv += extra or []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("console: "):
            self.stop()
            raise AssertionError(f"console did not start: {line!r} {''.join(self.stderr)}")
        self.url = line.split(" ", 1)[1].strip()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def open_browser() -> Iterator[tuple[Any, list[str]]]:
    """A Playwright page in a fresh headless Chromium profile, and the console errors it saw."""
    from playwright.sync_api import sync_playwright

    executable = require_chromium()
    profile = tempfile.mkdtemp(prefix="logferry-chromium-")
    errors: list[str] = []
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=executable,
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1400, "height": 900},
            )
            page = context.pages[0] if context.pages else context.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            try:
                yield page, errors
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)
