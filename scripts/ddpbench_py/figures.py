"""Figures from ddpbench result rows (matplotlib, installed into .venv by
scripts/setup.sh):

  <prefix>_throughput.png  throughput per run (bars, scaling efficiency noted)
  <prefix>_memory.png      peak memory per device, stacked per device
  <prefix>_scaling.png     throughput and scaling efficiency by device count,
                           one line per strategy (the single run is 1 device)
  <prefix>_history.png     throughput of each matrix entry over the nights, its
                           change points marked (with --history DIR of earlier nights)

scripts/plot_results.py is its command line; scripts/report.py --figures draws the same.
"""
import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ddpbench_py import history_page  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402


def label(row):
    return f"{R.experiment(row)}\n{R.devices_by_nodes(row)}, b={row['per_device_batch']}"


def where(rows):
    return f"{rows[0]['model']} on {rows[0].get('device_name') or rows[0].get('device')} ({rows[0].get('host')})"


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput_bars(rows, path):
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(rows)), 4))
    ax.bar(range(len(rows)), [R.num(r, "throughput_img_s") or 0 for r in rows], color="#4477aa")
    for i, r in enumerate(rows):
        if r.get("scaling_efficiency"):
            ax.annotate(f"eff {float(r['scaling_efficiency']):.2f}", (i, float(r["throughput_img_s"])),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), [label(r) for r in rows], fontsize=8)
    ax.set_ylabel("images / s")
    ax.set_title(f"Training throughput, {where(rows)}", fontsize=9)
    return save(fig, path)


def memory_bars(rows, path):
    fig, ax = plt.subplots(figsize=(max(6, 1.5 * len(rows)), 4))
    for i, r in enumerate(rows):
        bottom = 0.0
        for d, mb in enumerate(float(x) for x in r["mem_per_device_mb"].split("/") if x):
            ax.bar(i, mb, bottom=bottom, color=plt.cm.tab10(d % 10), edgecolor="white", label=f"device {d}")
            bottom += mb
    handles, names = ax.get_legend_handles_labels()
    uniq = dict(zip(names, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=8)
    ax.set_xticks(range(len(rows)), [label(r) for r in rows], fontsize=8)
    ax.set_ylabel("peak allocated MB (stacked per device)")
    ax.set_title("Peak memory per device", fontsize=9)
    return save(fig, path)


def series(row):
    """The curve a row belongs to: strategy and the options that are not device counts."""
    parts = [row.get("strategy", "?"), row.get("schedule", "")]
    if row.get("optimizer", "sgd") != "sgd":
        parts.append(row["optimizer"])
    if row.get("zero_reduce") == "all-reduce" or row.get("compression", "none") != "none":
        parts.append(row.get("zero_reduce") if row.get("zero_reduce") == "all-reduce" else row["compression"])
    return " ".join(p for p in parts if p)


def scaling_curves(rows, path):
    """Throughput and efficiency against devices; single is every curve's 1
    (the last row of a series at a device count is the one drawn)."""
    single = [r for r in rows if r.get("strategy") == "single"]
    fig, (tput, eff) = plt.subplots(1, 2, figsize=(11, 4))
    for name in sorted({series(r) for r in rows if r.get("strategy") != "single"}):
        at = {R.devices(r): r for r in rows if r.get("strategy") != "single" and series(r) == name}
        points = [(n, R.num(r, "throughput_img_s"), R.num(r, "scaling_efficiency")) for n, r in sorted(at.items())]
        if single:
            points = [(1, R.num(single[-1], "throughput_img_s"), 1.0)] + points
        tput.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        eff.plot([x for x, _, e in points if e is not None], [e for _, _, e in points if e is not None],
                 marker="o", label=name)
    tput.set(xlabel="devices", ylabel="images / s", title="Throughput by device count")
    eff.set(xlabel="devices", ylabel="scaling efficiency", title="Scaling efficiency (1 = linear)")
    eff.axhline(1.0, color="#999", lw=0.8, ls="--")
    for ax in (tput, eff):
        ax.legend(fontsize=8)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(where(rows), fontsize=9)
    return save(fig, path)


def history_lines(histories, path):
    """Each entry's throughput night after night (tonight last), one panel per
    entry, its change points as dashed lines with the segments' medians;
    histories: history_page.entry_histories()."""
    fig, axes = plt.subplots(len(histories), 1, figsize=(9, 2.2 * len(histories) + 0.6), squeeze=False)
    for ax, (name, series, changes) in zip(axes[:, 0], histories):
        ax.plot(range(len(series)), [n.value for n in series], marker="o", markersize=3, color="#357")
        cuts = [0, *(c.index for c in changes), len(series)]
        for (lo, hi), c in zip(zip(cuts, cuts[1:]), [None, *changes]):
            level = statistics.median(n.value for n in series[lo:hi])
            ax.hlines(level, lo - 0.3, hi - 0.7, colors="#999", linewidth=1)
            if c is not None:
                ax.axvline(c.index - 0.5, color="#b00" if c.ratio < 1 else "#070", linestyle="--", linewidth=1)
                ax.annotate(f"{100 * (c.ratio - 1):+.1f}%\n{series[c.index - 1].git_sha[:8]}..{series[c.index].git_sha[:8]}",
                            (c.index - 0.5, ax.get_ylim()[1]), fontsize=7, va="top", ha="left")
        ax.set_xticks(range(len(series)), [n.run_id for n in series], fontsize=6, rotation=30, ha="right")
        ax.set_ylabel("x reference" if name.endswith(history_page.OVER_REFERENCE) else "img/s", fontsize=8)
        ax.set_title(name, fontsize=9, loc="left")
    fig.suptitle("Throughput over the nights (beside a reference build: the ratio to it); dashed: change points "
                 "(red slower, green faster)", fontsize=9)
    return save(fig, path)


def night_figures(rows, history, prefix):
    """Every figure of a night; -> the PNG paths."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix + "x")), exist_ok=True)
    paths = [throughput_bars(rows, prefix + "_throughput.png"), memory_bars(rows, prefix + "_memory.png")]
    if any(R.devices(r) > 1 for r in rows):
        paths.append(scaling_curves(rows, prefix + "_scaling.png"))
    if history:
        paths.append(history_lines(history_page.entry_histories(rows, history), prefix + "_history.png"))
    return paths

