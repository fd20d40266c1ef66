"""The nightly report's history: each entry's throughput over the nights with
the change points the gate's method finds (ddpbench_py/changepoints.py) and
the commits between the last good and the first bad night, as a table for the
markdown and HTML pages and the data the history figure marks
(figures.history_lines). Reads git only to list those commits, when the
revisions are in the checkout the report script sits in.
"""
import os
import subprocess

from ddpbench_py import changepoints
from ddpbench_py import nights as N
from ddpbench_py import rows as R

KEY = "throughput_img_s"
RATIO = "throughput_vs_reference"
OVER_REFERENCE = " (over the reference build)"  # marks an entry whose history is its ratio
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def entry_histories(rows, history):
    """[(entry, [Night], [Change])] for each workload of tonight (its launches
    folded into one), tonight last: its throughput, or where tonight ran beside
    a reference build the ratio the gate watches then (the entry's name says so)."""
    out = []
    for row in N.one_per_workload(rows):
        past = [h for h in history if R.workload(h) == R.workload(row)]
        key = RATIO if N.has_reference(row) else KEY
        series = N.series(past + [row], key)
        found = changepoints.detect([n.value for n in series]) if len(series) >= 4 else []
        out.append((R.experiment(row) + (OVER_REFERENCE if key == RATIO else ""), series, found))
    return out


def level(value):
    """A throughput to 0.1 img/s, a ratio to 0.001."""
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"


def commits(good, bad, limit=8):
    """'sha subject' lines of the commits after good up to bad (git log), or
    a note when this checkout does not know them."""
    if good == bad:
        return "same revision"
    done = subprocess.run(["git", "log", "--format=%h %s", f"{good}..{bad}"], stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True, cwd=CHECKOUT)
    lines = done.stdout.splitlines()
    if done.returncode or not lines:
        return f"{good}..{bad} (not in this checkout)"
    more = f"; {len(lines) - limit} more" if len(lines) > limit else ""
    return "; ".join(lines[:limit]) + more


def section(histories):
    """(title, header, body) of the change points, for report.sections' list."""
    body = []
    for entry, series, found in histories:
        for c in found:
            good, bad = series[c.index - 1], series[c.index]
            kind = "regression" if N.worse(KEY, c.ratio) else "improvement"
            body.append([entry, kind, f"{100 * (c.ratio - 1):+.1f}%", f"{level(c.before)} -> {level(c.after)}",
                         f"{100 * c.confidence:.2f}%", f"{good.run_id} ({good.git_sha})",
                         f"{bad.run_id} ({bad.git_sha})", commits(good.git_sha, bad.git_sha)])
    if not body:
        nights = max((len(s) for _, s, _ in histories), default=0)
        body = [["-", "none", "", "", "", "", "", f"no change point in up to {nights} nights"]]
    return ("Change points over the nights (throughput)",
            ["entry", "kind", "size", "img/s or ratio (medians)", "confidence", "last good night", "first bad night", "detail"],
            body)
