"""One self-contained HTML page for a night: the report's tables and its
figures embedded as base64 PNGs, so the page can be mailed or archived as
one file. Standard library only.
"""
import base64
import html
import os

STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
p.env { font-family: monospace; font-size: 12px; color: #555; }
table { border-collapse: collapse; font-size: 12px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; white-space: nowrap; }
th { white-space: normal; }
table.detail td:last-child { white-space: normal; text-align: left; min-width: 200px; }
th { background: #eef; } td:first-child, th:first-child { text-align: left; }
td.fail { color: #b00; font-weight: bold; }
figure { display: inline-block; margin: 8px; vertical-align: top; } figure img { max-width: 100%; }
figcaption { font-size: 12px; color: #555; }
"""


def table(header, body):
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    lines = []
    for cells in body:
        tds = "".join(f"<td{' class=fail' if 'FAIL' in str(c) else ''}>{html.escape(str(c))}</td>" for c in cells)
        lines.append(f"<tr>{tds}</tr>")
    cls = " class=detail" if header and header[-1] == "detail" else ""  # free text, wrapped
    return f"<table{cls}><tr>{head}</tr>{''.join(lines)}</table>"


def figure(path):
    with open(path, "rb") as f:
        data = base64.b64encode(f.read()).decode("ascii")
    name = html.escape(os.path.basename(path))
    return f'<figure><img alt="{name}" src="data:image/png;base64,{data}"><figcaption>{name}</figcaption></figure>'


def gate(lines):
    """The regression gate's verdict: red when a line says REGRESSION."""
    bad = any(line.startswith("REGRESSION") for line in lines)
    colour = "#b00" if bad else "#070"
    return (f'<h2>Regression gate</h2><pre style="color:{colour}; font-size:12px">'
            f'{html.escape(chr(10).join(lines))}</pre>')


def projected(title, header, body, image, note):
    """The projected section (scripts/project.py's table and figure), kept
    apart from the measured tables: a prediction, with its note on why."""
    parts = [f"<h2>{html.escape(title)}</h2>", f'<p style="font-size:12px; color:#555">{html.escape(note)}</p>',
             table(header, body)]
    if image:
        parts.append(figure(image))
    return "\n".join(parts)


def page(title, environment, sections, images, gate_lines=(), projection=None):
    """projection: projected()'s arguments, a section after the measured ones."""
    parts = [f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p class=env>{html.escape(environment)}</p>"]
    if gate_lines:
        parts.append(gate(gate_lines))
    for name, header, body in sections:
        parts += [f"<h2>{html.escape(name)}</h2>", table(header, body)]
    if images:
        parts += ["<h2>Figures</h2>", *map(figure, images)]
    if projection:
        parts.append(projected(*projection))
    parts.append("</body></html>\n")
    return "\n".join(parts)
