"""The Markdown report (``report.md``): sections, the seeds' tables, figures as links to
``plots/*.png``."""

from __future__ import annotations

from reports.render.table import _md, to_markdown


def render(report) -> str:
    out = [f"# {report.title}", ""]
    out += [f"- [{_md(s.title)}](#{s.key})" for s in report.sections]
    for section in report.sections:
        out += ["", f'<a id="{section.key}"></a>', "", f"## {_md(section.title)}", ""]
        for paragraph in section.paragraphs:
            out += [_md(paragraph), ""]
        if section.bullets:
            out += [f"- {_md(b)}" for b in section.bullets] + [""]
        for table in section.tables:
            out.append(to_markdown(table))
        for plot in section.plots:
            out += [f"### {_md(plot.title)}", "", f"![{_md(plot.title)}](plots/{plot.key}.png)",
                    "", _md(plot.caption), ""]
    return "\n".join(out).rstrip() + "\n"
