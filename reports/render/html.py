"""The one-page HTML report: self-contained (inline CSS, figures as base64 PNG, no external
URL), every row-derived string escaped (``table.to_html`` and ``html.escape`` here).

A Content-Security-Policy allows only data: images, inline styles and the one hashed script
below, so even a missed escape could not run code. That script records JavaScript errors
on ``<html data-js-errors=...>`` and sets ``data-js-ok`` when the page loaded, for the
headless-Chromium check (``reports/render/screenshot.py``).
"""

from __future__ import annotations

import base64
import hashlib
import html

from reports.render.table import to_html

HOOK = ("(function(){var d=document.documentElement,n=0;"
        "window.addEventListener('error',function(e){n+=1;"
        "d.setAttribute('data-js-errors',n+': '+(e.message||'error'));});"
        "window.addEventListener('DOMContentLoaded',function(){"
        "d.setAttribute('data-js-ok','1');});})();")
HOOK_HASH = base64.b64encode(hashlib.sha256(HOOK.encode()).digest()).decode()
CSP = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
       f"script-src 'sha256-{HOOK_HASH}'")

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;
max-width:1400px;padding:0 1.5em 3em;color:#1b1f24;background:#fff}
h1{margin-top:.8em}h2{border-bottom:2px solid #d0d7de;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.02em;margin:1.6em 0 .3em}
nav ul{columns:3;list-style:none;padding:0}
section.table{overflow-x:auto}
table{border-collapse:collapse;font-size:12.5px;margin:.3em 0}
th,td{border:1px solid #d0d7de;padding:3px 7px;vertical-align:top}
th{background:#f3f5f7;text-align:left}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td:first-child{white-space:nowrap}
td.fail{color:#a40e26;background:#fff0f0}
td.muted{color:#8c959f}
td.hist{color:#57606a;font-style:italic;background:#fafafa}
tr:nth-child(even) td:not(.fail):not(.hist){background:#fbfcfd}
p.caption{color:#57606a;margin:.1em 0 .3em}
ul.notes{color:#57606a;font-size:12px;margin:.2em 0 1em}
figure{margin:1em 0}figure img{max-width:100%;border:1px solid #eaeef2}
figcaption{color:#57606a;font-size:12px}
.warn{color:#9a6700}
"""


def _plot(plot) -> str:
    data = base64.b64encode(plot.png).decode("ascii")
    esc = html.escape
    return (f'<figure id="plot-{esc(plot.key)}"><h3>{esc(plot.title)}</h3>'
            f'<img alt="{esc(plot.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(plot.caption)}</figcaption></figure>")


def render(report) -> str:
    esc = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP, quote=False)}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{esc(report.title)}</title>", f"<script>{HOOK}</script>",
           f"<style>{CSS}</style>", "</head>", "<body>", f"<h1>{esc(report.title)}</h1>",
           "<nav><ul>"]
    out += [f'<li><a href="#{esc(s.key)}">{esc(s.title)}</a></li>' for s in report.sections]
    out.append("</ul></nav>")
    for section in report.sections:
        out.append(f'<section id="{esc(section.key)}"><h2>{esc(section.title)}</h2>')
        for paragraph in section.paragraphs:
            cls = ' class="warn"' if paragraph.startswith("warning:") else ""
            out.append(f"<p{cls}>{esc(paragraph)}</p>")
        if section.bullets:
            out.append("<ul>" + "".join(f"<li>{esc(b)}</li>" for b in section.bullets)
                       + "</ul>")
        out += [to_html(t) for t in section.tables]
        out += [_plot(p) for p in section.plots]
        out.append("</section>")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
