"""Debian's headless Chromium for the browser tests (the Dagster UI, the graph view): where it is, its flags,
and one call giving the DOM after a page ran (virtual time), optionally with a screenshot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)


def headless(args: list[str]) -> str:
    """One headless Chromium run's stdout; on a loaded 2-core machine its start-up can stall, so a run that
    times out is retried once (with a longer limit) before the test fails."""

    def run(limit: int) -> str:
        return subprocess.run(args, check=True, capture_output=True, timeout=limit, text=True).stdout

    try:
        return run(120)
    except subprocess.TimeoutExpired:
        return run(240)


def chromium_dom(
    url: str,
    profile: Path,
    *,
    screenshot: Path | None = None,
    budget_ms: int = 15000,
    window: str = "1500,950",
) -> str:
    """The DOM of ``url`` after ``budget_ms`` of virtual time, with ``profile`` as the user data directory;
    with ``screenshot`` a PNG of the page is written there first."""
    args = [
        str(CHROMIUM),
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={budget_ms}",
        f"--window-size={window}",
    ]
    if screenshot is not None:
        headless([*args, f"--screenshot={screenshot}", url])
    return headless([*args, "--dump-dom", url])
