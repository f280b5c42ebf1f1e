"""Every relative link in README.md and docs/*.md resolves: the file or folder exists, and
a ``#anchor`` names a heading of the Markdown file it points into, slugged as GitHub slugs
headings (github-slugger: lower case, punctuation dropped, each space a hyphen, ``-1``,
``-2`` … after repeats). Links inside fenced code blocks and code spans are not links;
absolute URLs (``https:``, ``mailto:``) are not checked here."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
COMMENT = re.compile(r"<!--.*?-->")
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
INLINE = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)=[\"']([^\"']+)[\"']", re.IGNORECASE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (github-slugger on the rendered text)."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    kept = []
    for char in text.lower():
        category = unicodedata.category(char)
        if char in " -" or category[0] in "LMN" or category == "Pc":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def _lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        yield number, line


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives a Markdown file: its headings' slugs (repeats numbered)
    and explicit ``<a id=…>`` / ``<a name=…>``."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _lines(path.read_text(encoding="utf-8")):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in a Markdown file."""
    out = []
    for number, line in _lines(path.read_text(encoding="utf-8")):
        line = COMMENT.sub("", CODE_SPAN.sub("", line))   # code spans hold no links
        out.extend((number, target) for target in INLINE.findall(line))
        reference = REFERENCE.match(line)
        if reference:
            out.append((number, reference.group(1)))
    return out


def broken_links(files: list[Path], root: Path) -> list[str]:
    """One message per relative link in ``files`` that does not resolve."""
    problems = []
    cache: dict[Path, set[str]] = {}
    for path in files:
        for number, target in links(path):
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            where = f"{path.relative_to(root)}:{number}: {target}"
            file_part, _, anchor = target.partition("#")
            file_part = unquote(file_part)
            if not file_part:
                destination = path
            elif file_part.startswith("/"):
                destination = root / file_part.lstrip("/")
            else:
                destination = path.parent / file_part
            if not destination.exists():
                problems.append(f"{where}: no such file or folder")
                continue
            if anchor and destination.is_file() and destination.suffix == ".md":
                if destination not in cache:
                    cache[destination] = anchors(destination)
                if unquote(anchor) not in cache[destination]:
                    problems.append(f"{where}: no heading or anchor '{anchor}' in "
                                    f"{destination.relative_to(root)}")
    return problems


def documentation(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    files = documentation(ROOT)
    assert len(files) > 2, "README.md and docs/*.md expected"
    assert broken_links(files, ROOT) == []


def test_the_checker_reports_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "src").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Float64 proof\n\n## `--earlier`: wider intervals\n\n## Notes\n\n## Notes\n"
        '<a id="kept"></a>\n', encoding="utf-8")
    (tmp_path / "README.md").write_text(
        "# Project\n\n"
        "See [the guide](docs/guide.md), [its proof](docs/guide.md#float64-proof),\n"
        "[wider](docs/guide.md#--earlier-wider-intervals), [repeat](docs/guide.md#notes-1),\n"
        "[kept](docs/guide.md#kept), [source](src/), [top](#project), [web](https://example.org/x).\n"
        "`[not a link](nowhere.md)` and\n\n```\n[in code](nowhere.md)\n```\n\n"
        "Broken: [gone](docs/missing.md) and [no such heading](docs/guide.md#float-64-proof).\n"
        "[ref]: docs/also-missing.md\n", encoding="utf-8")
    problems = broken_links(documentation(tmp_path), tmp_path)
    assert problems == [
        "README.md:12: docs/missing.md: no such file or folder",
        "README.md:12: docs/guide.md#float-64-proof: no heading or anchor 'float-64-proof' "
        "in docs/guide.md",
        "README.md:13: docs/also-missing.md: no such file or folder",
    ]


@pytest.mark.parametrize("heading, expected", [
    ("Float64 proof", "float64-proof"),
    ("Device time", "device-time"),
    ("`--earlier`: intervals from earlier runs", "--earlier-intervals-from-earlier-runs"),
    ("What a run costs, and why", "what-a-run-costs-and-why"),
    ("[`published/h100`](published/h100/README.md) folder", "publishedh100-folder"),
    ("`compile_channels_last` and `ort_all`", "compile_channels_last-and-ort_all"),
    ("Results at a glance", "results-at-a-glance"),
])
def test_slugs_are_githubs(heading, expected):
    assert slug(heading) == expected
