"""A neutral table (title, columns, cells, notes) rendered to Markdown and to HTML.

Every table is built once as data and rendered twice, so the Markdown file and the HTML page
cannot disagree. All text is escaped at render time: strings come from result rows, which
anyone can write (a model or host named ``<script>`` must show as text).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Cell:
    text: str
    kind: str = ""          # "", "fail", "best", "hist", "muted" (styling only)
    title: str = ""         # hover text in HTML (full failure reason, CI, ...)
    emphasis: str = ""      # "", "bold", "italic" (the seeds bold the winner, italicise
                            # convnet-benchmarks' "best per layer" row)


@dataclass(frozen=True)
class Table:
    key: str                            # stable id (HTML anchor)
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    numeric: tuple[bool, ...] = ()      # right-align these columns
    notes: tuple[str, ...] = field(default=())
    caption: str = ""


def cell(text: object, **kw) -> Cell:
    return Cell("" if text is None else str(text), **kw)


def _md(text: str) -> str:
    # GitHub renders inline HTML: "<" and "&" become entities so row strings stay text.
    text = text.replace("&", "&amp;").replace("<", "&lt;")
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(table: Table, level: int = 3) -> str:
    out = [f"{'#' * level} {_md(table.title)}", ""]
    if table.caption:
        out += [_md(table.caption), ""]
    out.append("| " + " | ".join(_md(c) for c in table.columns) + " |")
    align = [("---:" if table.numeric and i < len(table.numeric) and table.numeric[i]
              else ":---") for i in range(len(table.columns))]
    out.append("|" + "|".join(align) + "|")
    for row in table.rows:
        texts = []
        for c in row:
            text = _md(c.text)
            if text and c.emphasis == "bold":
                text = f"**{text}**"
            elif text and c.emphasis == "italic":
                text = f"_{text}_"
            texts.append(text)
        out.append("| " + " | ".join(texts) + " |")
    if table.notes:
        out.append("")
        out += [f"* {_md(n)}" for n in table.notes]
    return "\n".join(out) + "\n"


def to_html(table: Table, level: int = 3) -> str:
    esc = html.escape
    out = [f'<section class="table" id="{esc(table.key)}">',
           f"<h{level}>{esc(table.title)}</h{level}>"]
    if table.caption:
        out.append(f'<p class="caption">{esc(table.caption)}</p>')
    out.append("<table><thead><tr>")
    out += [f"<th>{esc(c)}</th>" for c in table.columns]
    out.append("</tr></thead><tbody>")
    for row in table.rows:
        out.append("<tr>")
        for i, c in enumerate(row):
            classes = [c.kind] if c.kind else []
            if table.numeric and i < len(table.numeric) and table.numeric[i]:
                classes.append("num")
            attrs = f' class="{" ".join(classes)}"' if classes else ""
            if c.title:
                attrs += f' title="{esc(c.title)}"'
            text = esc(c.text)
            if c.emphasis == "bold":
                text = f"<strong>{text}</strong>"
            elif c.emphasis == "italic":
                text = f"<em>{text}</em>"
            out.append(f"<td{attrs}>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    if table.notes:
        out.append('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in table.notes)
                   + "</ul>")
    out.append("</section>")
    return "\n".join(out)
