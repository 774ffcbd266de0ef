"""Retake docs/images/console-*.png from a real running pipeline (docs/console.md).

Runs ``logferry demo --keep-running`` (secured, as by default) in a fresh workdir, waits
for its report and the loader's landed Parquet, then drives Debian's Chromium with
Playwright (as tests/console/ do) over the demo's console:

  console.png          Clusters: both clusters, brokers, listeners, charts
  console-rates.png    Topics: bytes and messages in per second, counted
  console-lag.png      Consumer groups: lag in messages, bytes and time, its history
  console-audit.png    Audit: agent -> mirror per event-time window, the landed tier
  console-stale.png    a live broker hung (kill -STOP): the live card stale, the analysis card current
  console-kill9.png    a live broker killed (kill -9): NOT ANSWERING at the next reading
  console-down.png     the same broker once ZooKeeper dropped it: DOWN since, where it was

then restarts the killed broker (the demo's kill -USR1) and stops the demo (SIGINT).

    .venv/bin/python scripts/console_screenshots.py [--out docs/images] [--workdir DIR]

Each PNG is checked to be under 1 MB (they are 30-150 KB). Needs what the demo needs
(`make demo` works) and /usr/bin/chromium ($LOGFERRY_CHROMIUM).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("LOGFERRY_CHROMIUM", "/usr/bin/chromium")
WIDTH = 1600
"""The page's tables fit 1,600 px (issue 39)."""
MAX_BYTES = 1 << 20


class Demo:
    """``logferry demo --keep-running`` as a child; its stdout read line by line."""

    def __init__(self, workdir: Path, seconds: float, rate: float, keep_rate: float):
        argv = [sys.executable, "-m", "broker", "demo", "--keep-running", "--workdir", str(workdir)]
        argv += ["--seconds", str(seconds), "--rate", str(rate), "--keep-rate", str(keep_rate)]
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
        )
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            sys.stdout.write("  | " + line)
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first line matching ``pattern``, waiting up to ``timeout`` s for it."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for line in self.lines:
                    found = re.search(pattern, line)
                    if found:
                        return found
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise SystemExit(f"the demo did not print /{pattern}/ within {timeout:.0f}s")
                self.changed.wait(min(left, 1.0))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                self.proc.wait(30)


def wait_js(page: Any, expression: str, arg: Any = None, timeout_s: float = 30.0) -> None:
    page.wait_for_function(expression, arg=arg, timeout=int(timeout_s * 1000))


def state_of(broker: int) -> str:
    """JS: the live card's state cell of ``broker``."""
    return (
        f'(document.querySelector(\'[data-cluster="live"] tr[data-broker="{broker}"] '
        f'[data-field="broker-state"]\')?.textContent || "")'
    )


def shoot(page: Any, path: Path, height: int | None = None, selector: str | None = None) -> None:
    """The page (its top ``height`` px, or all of it up to 1,400 px) or one element."""
    page.wait_for_timeout(300)  # the render after the last snapshot
    if selector:
        page.locator(selector).first.screenshot(path=str(path))
    else:
        full = int(page.evaluate("document.documentElement.scrollHeight"))
        page.screenshot(path=str(path), clip={"x": 0, "y": 0, "width": WIDTH, "height": min(height or full, 1400)})
    size = path.stat().st_size
    print(f"screenshot {path} ({size // 1024} KiB)", flush=True)
    if size >= MAX_BYTES:
        raise SystemExit(f"{path} is {size} bytes: keep the docs' pictures under 1 MB")


def view(page: Any, name: str) -> None:
    page.click(f'#tabs button[data-view="{name}"]')


def take(url: str, out: Path, brokers: dict[int, int], demo: Demo) -> None:
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="logferry-shots-")
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                profile,
                executable_path=CHROMIUM,
                headless=True,
                args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
                viewport={"width": WIDTH, "height": 900},
            )
            page = context.pages[0] if context.pages else context.new_page()
            page.goto(url)
            wait_js(page, 'document.querySelectorAll("[data-cluster] [data-as-of]").length == 2')
            page.wait_for_timeout(8000)  # a few readings: the charts and rates fill

            view(page, "clusters")
            shoot(page, out / "console.png", height=560)
            view(page, "topics")
            shoot(page, out / "console-rates.png", height=620)
            view(page, "groups")
            wait_js(page, 'document.querySelector("[data-lag-history]") !== null')
            shoot(page, out / "console-lag.png", height=720)
            view(page, "audit")
            wait_js(page, 'document.querySelector("[data-landed-topic]") !== null', timeout_s=60)
            page.fill('#audit-filter input[name="topic"]', "app")  # one topic: the landed tier fits below
            shoot(page, out / "console-audit.png")
            page.fill('#audit-filter input[name="topic"]', "")

            # a hung broker (SIGSTOP): its requests wait for their timeout; the card goes stale
            view(page, "clusters")
            hung = max(brokers)
            os.kill(brokers[hung], signal.SIGSTOP)
            try:
                page.wait_for_selector('[data-stale="live"]', timeout=15_000)
                page.wait_for_timeout(1200)  # the analysis card's "as of" moves on meanwhile
                shoot(page, out / "console-stale.png", height=560)
            finally:
                os.kill(brokers[hung], signal.SIGCONT)
            page.wait_for_selector('[data-stale="live"]', state="detached", timeout=30_000)
            wait_js(page, f"{state_of(hung)} === 'up'", timeout_s=30)

            # kill -9: the next reading says so; ZooKeeper drops it after its session
            victim = min(brokers)
            os.kill(brokers[victim], signal.SIGKILL)
            wait_js(page, f"{state_of(victim)}.startsWith('NOT ANSWERING')", timeout_s=5)
            page.wait_for_timeout(1000)
            shoot(page, out / "console-kill9.png", height=560)
            wait_js(page, f"{state_of(victim)}.startsWith('DOWN since')", timeout_s=40)
            page.wait_for_timeout(2500)
            shoot(page, out / "console-down.png", height=560)

            os.kill(demo.proc.pid, signal.SIGUSR1)  # the demo restarts what exited
            wait_js(page, f"{state_of(victim)} === 'up'", timeout_s=60)
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    p.add_argument("--workdir", type=Path, default=ROOT / ".logferry" / "screenshots", help="the demo's workdir")
    p.add_argument("--seconds", type=float, default=20.0, help="the demo's measured run (default 20)")
    p.add_argument("--rate", type=float, default=400.0, help="records/s of the measured run (default 400)")
    p.add_argument("--keep-rate", type=float, default=200.0, help="records/s while it keeps running (default 200)")
    args = p.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium (scripts/install-system-deps.sh)")
    args.out.mkdir(parents=True, exist_ok=True)
    demo = Demo(args.workdir, args.seconds, args.rate, args.keep_rate)
    try:
        url = demo.wait_for(r"Web console \(both clusters, live\): (\S+)", 600).group(1)
        demo.wait_for(r"Press Ctrl-C to stop everything", 60)
        brokers: dict[int, int] = {}
        for line in demo.lines:
            found = re.match(r"\s+kill -9 (\d+)\s+# live broker (\d+)", line)
            if found:
                brokers[int(found.group(2))] = int(found.group(1))
        if len(brokers) < 2:
            raise SystemExit(f"the demo named {len(brokers)} live broker(s), not 2")
        take(url, args.out, brokers, demo)
    finally:
        demo.stop()
    print(f"done: {args.out}/console*.png; the demo's log in {args.workdir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
