"""Open the HTML report in headless Chromium: take a screenshot and check that the page ran
without JavaScript errors.

    python -m reports.render.screenshot report/report.html [--png shot.png] [--height 4000]

Uses Debian's ``chromium`` (``apt-get install -y chromium``); exits 77 (skip) when it is
absent. Two passes: ``--screenshot`` for the PNG and ``--dump-dom`` for the DOM after
load, where the page's own error hook (``reports/render/html.py``) leaves ``data-js-ok="1"`` and,
on any error, ``data-js-errors``. Console errors and CSP refusals logged on stderr
(``--enable-logging=stderr --v=0``) count as errors too.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
         "--virtual-time-budget=3000")
CONSOLE_ERROR = re.compile(r"CONSOLE.*(Uncaught|Error|Refused)|Refused to|Uncaught ",
                           re.IGNORECASE)


@dataclass(frozen=True)
class Check:
    png: Path
    js_ok: bool
    errors: tuple[str, ...]     # page-reported errors and console error lines

    @property
    def passed(self) -> bool:
        return self.js_ok and not self.errors and self.png.exists() and \
            self.png.stat().st_size > 1000


def chromium_path() -> str | None:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    return shutil.which("chromium")


def _run(binary: str, args: list[str], profile: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


def check(page: Path, png: Path, width: int = 1400, height: int = 4000,
          timeout: float = 120) -> Check:
    binary = chromium_path()
    if binary is None:
        raise FileNotFoundError(f"{CHROMIUM} not found (apt-get install -y chromium)")
    url = page.resolve().as_uri()
    errors: list[str] = []
    with tempfile.TemporaryDirectory() as profile:
        shot = _run(binary, [f"--window-size={width},{height}",
                             f"--screenshot={png.resolve()}", url], profile, timeout)
    with tempfile.TemporaryDirectory() as profile:
        dom = _run(binary, ["--dump-dom", url], profile, timeout)
    for proc in (shot, dom):
        errors += [line.strip() for line in proc.stderr.splitlines()
                   if CONSOLE_ERROR.search(line)]
    head = dom.stdout[:2000]
    js_ok = 'data-js-ok="1"' in head
    found = re.search(r'data-js-errors="([^"]*)"', head)
    if found:
        errors.append(f"page error: {found.group(1)}")
    return Check(png, js_ok, tuple(errors))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.render.screenshot", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("page", type=Path)
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--height", type=int, default=4000)
    args = parser.parse_args(argv)
    if chromium_path() is None:
        print(f"skip: {CHROMIUM} not found (apt-get install -y chromium)", file=sys.stderr)
        return 77
    png = args.png or args.page.with_suffix(".png")
    result = check(args.page, png, height=args.height)
    for error in result.errors:
        print(f"error: {error}", file=sys.stderr)
    print(f"{'ok' if result.passed else 'FAILED'}: screenshot {png}, page script ran: "
          f"{result.js_ok}, {len(result.errors)} error(s)")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
