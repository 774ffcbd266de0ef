"""Scraping a metrics endpoint in tests: fetch it, check it with promtool, read values.

Values are looked up by name and labels (label order in the text is the renderer's
business), parsed with prometheus_client's own parser.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

PROMTOOL_MISSING = "promtool is not installed (Debian package `prometheus`; `make system-deps` installs it)"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> str:
    """The body of ``GET url`` (a ``/metrics`` endpoint)."""
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


def samples(text: str) -> Samples:
    """Every sample in a Prometheus text exposition: ``(name, labels) -> value``."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(parsed: Samples, name: str, **labels: str) -> float | None:
    """The value of the series ``name{labels}``, or None when it is absent."""
    return parsed.get((name, frozenset(labels.items())))


def promtool_check(text: str) -> None:
    """Fail unless ``promtool check metrics`` accepts ``text``; skip without promtool."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip(PROMTOOL_MISSING)
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60)
    problems = (result.stdout + result.stderr).decode().strip()
    assert result.returncode == 0 and not problems, f"promtool check metrics: {problems}"
