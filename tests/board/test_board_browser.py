"""`git lanes report`'s page rendered by a real headless browser (SPEC §17.5): the screenshot is not blank
and shows the task graph (its boxes in their states' colours) and the timeline (session, failed attempt
and verification bars, each much larger than its legend swatch). Skipped, saying so, where no browser is
installed (`.ci/run` installs Chromium from the OS packages, best effort)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from board_world import parked_batch, png_pixels

from git_lanes.board import render_report

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell")
COLOURS = {"released box": (0x38, 0x8E, 0x3C), "needs_human box": (0xC6, 0x28, 0x28),
           "skipped box": (0x9E, 0x9E, 0x9E), "session bar": (0x64, 0xB5, 0xF6),
           "failed attempt bar": (0xE5, 0x39, 0x35), "verification bar": (0x8E, 0x24, 0xAA)}


def browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def test_a_headless_browser_shows_the_graph_and_the_timeline(tmp_path):
    exe = browser()
    if exe is None:
        pytest.skip("no headless browser installed (chromium): the report's rendering is not checked here")
    page = tmp_path / "report.html"
    page.write_text(render_report(parked_batch()), encoding="utf-8")
    shot = tmp_path / "shot.png"
    proc = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--force-device-scale-factor=1", "--force-color-profile=srgb",
                           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,1150",
                           f"--screenshot={shot}", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    width, height, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 1150)
    counts: dict[tuple[int, int, int], int] = {}
    for row in rows:
        for i in range(0, len(row), 3):
            pixel = (row[i], row[i + 1], row[i + 2])
            counts[pixel] = counts.get(pixel, 0) + 1
    assert len(counts) > 20 and max(counts.values()) < width * height * 0.97   # not blank
    near = {name: sum(n for (r, g, b), n in counts.items()
                      if abs(r - c[0]) <= 4 and abs(g - c[1]) <= 4 and abs(b - c[2]) <= 4)
            for name, c in COLOURS.items()}
    for name in ("released box", "needs_human box", "skipped box"):
        assert near[name] > 2000, near                              # a 170 x 40 box, less its text
    # each more than its 12 x 10 legend swatch: the 0.4 s failed attempt is about 18 x 8 pixels
    assert near["session bar"] > 1000 and near["verification bar"] > 1000 and near["failed attempt bar"] > 200, near
