#!/usr/bin/env python3
"""What-if tables: what would each strategy do on a cluster we do not have?
A thin front to `ddpbench --project` (docs/projection.md), which predicts
every strategy's step from a one-device profile (`ddpbench --calibrate=FILE`):
this runs it, keeps its CSV and draws what a table cannot show at a glance.

  <out>/projection.csv   ddpbench's rows, one per strategy x cluster size
  <out>/projection.png   predicted img/s against world size, log-log, one line
                         per strategy (pmp per schedule), ideal scaling dashed,
                         extrapolated points (world > 16x measured) hollow
  <out>/projection.html  one self-contained page: the table and the figure

    scripts/project.py results/profile.json
    scripts/project.py results/profile.json --nodes=1,4,16 --inter=100gbe --strategies=ddp,zero3
    scripts/project.py results/profile.json --intra=measured,bw=500Mbit/s -- --schedule=1f1b

The table ddpbench prints goes to stdout as it prints it; a flag ddpbench
refuses ends here with its own line and exit code. Flags after `--` go to
ddpbench as they are. scripts/report.py --projection=<out>/projection.csv puts
the same table and figure in a night's report.
"""
import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(HERE, "..", ".venv")
if (__name__ == "__main__" and importlib.util.find_spec("matplotlib") is None  # the figure's; not imported yet
        and os.path.exists(VENV) and os.path.realpath(sys.prefix) != os.path.realpath(VENV)):
    py = os.path.join(VENV, "bin", "python")
    os.execv(py, [py, *sys.argv])  # run as `scripts/project.py` from any python3
from ddpbench_py import report_html  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402

# ddpbench --project-csv's columns, in its order.
COLUMNS = ["strategy", "schedule", "nodes", "gpus_per_node", "world", "batch_per_device", "global_batch", "step_ms",
           "compute_ms", "exposed_comm_ms", "bubble_ms", "img_s", "scaling_efficiency", "memory_mb", "max_batch",
           "max_batch_recompute", "error_pct", "extrapolated", "largest_term", "intra", "inter", "profile"]
# The flags this script gives ddpbench itself: not accepted after `--`.
OWN_FLAGS = ("--project", "--project-csv", "--strategies", "--nodes", "--gpus-per-node", "--intra", "--inter",
             "--device-memory-gb", "--batch-size")


class ProjectionError(Exception):
    pass


def load(path):
    """The rows of a ddpbench --project-csv file; a ProjectionError names a
    file that is not one."""
    try:
        body = R.read_table(path, COLUMNS, "projection")
    except R.RowsError as e:
        raise ProjectionError(str(e))
    for i, row in enumerate(body):
        for key in ("world", "img_s"):
            if R.num(row, key) is None:
                raise ProjectionError(f"{path}:{i + 2}: {key}={row[key]!r}: not a number")
    return body


def label(row):
    """pmp's lines are one per schedule: 'pmp 1f1b'."""
    return f"{row['strategy']} {row['schedule']}" if row.get("schedule") else row["strategy"]


def single_img_s(rows):
    """One device's img/s, from the row whose efficiency has the most digits
    (efficiency = img/s / (world x one device's img/s)); None without one."""
    known = [r for r in rows if (R.num(r, "scaling_efficiency") or 0) > 0 and (R.num(r, "img_s") or 0) > 0]
    if not known:
        return None
    r = max(known, key=lambda r: R.num(r, "scaling_efficiency"))
    return R.num(r, "img_s") / (R.num(r, "scaling_efficiency") * R.num(r, "world"))


def series(rows):
    """{label: rows sorted by world}, labels in order of first appearance;
    points of 0 img/s (nothing to draw on a log axis) left out."""
    out = {}
    for r in rows:
        if (R.num(r, "img_s") or 0) > 0:
            out.setdefault(label(r), []).append(r)
    return {k: sorted(v, key=lambda r: R.num(r, "world")) for k, v in out.items()}


def where(rows):
    """'prof.json (intra nvlink4, inter ib-ndr400, 8 GPUs/node)'."""
    r = rows[0]
    inter = next((x["inter"] for x in rows if x["inter"]), "")  # empty on one node
    links = f"intra {r['intra']}" + (f", inter {inter}" if inter else "")
    return f"{os.path.basename(r['profile'])} ({links}, {r['gpus_per_node']} GPUs/node)"


def draw(rows, path):
    """The log-log figure of img/s against world size -> path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import ScalarFormatter
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (name, points) in enumerate(series(rows).items()):
        colour = plt.cm.tab10(i % 10)
        x, y = [R.num(r, "world") for r in points], [R.num(r, "img_s") for r in points]
        ax.plot(x, y, "-o", color=colour, label=name)
        far = [(xi, yi) for r, xi, yi in zip(points, x, y) if r.get("extrapolated") == "1"]
        if far:
            ax.plot(*zip(*far), "o", color=colour, markerfacecolor="white")  # hollow over the filled one
    one = single_img_s(rows)
    if one:
        worlds = sorted({R.num(r, "world") for r in rows})
        ax.plot(worlds, [w * one for w in worlds], "k--", linewidth=1, label="ideal (world x 1 device)")
    handles, _ = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="o", color="grey", markerfacecolor="white", linestyle="",
                          label="extrapolated (> 16x measured world)"))
    ax.legend(handles=handles, fontsize=8)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())  # 8, 16, ... rather than 2^3, 2^4
    ax.set_yscale("log")
    ax.set_xlabel("world size (devices)")
    ax.set_ylabel("predicted images / s")
    ax.set_title(f"Projected throughput from {where(rows)}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def split(row):
    return f"{row['compute_ms']} / {row['exposed_comm_ms']} / {row['bubble_ms']}"


def error(row):
    return f"±{row['error_pct']}%" if row.get("error_pct") else "not validated"


def memory(row):
    """memory_mb, marked where the batch does not fit (max_batch below it)."""
    largest, batch = R.num(row, "max_batch"), R.num(row, "batch_per_device")
    return row["memory_mb"] + (" (does not fit)" if largest is not None and batch and largest < batch else "")


TABLE_COLUMNS = [
    ("strategy", lambda r: r["strategy"]),
    ("schedule", lambda r: r["schedule"]),
    ("nodes x GPUs/node", lambda r: f"{r['nodes']} x {r['gpus_per_node']}"),
    ("world", lambda r: r["world"]),
    ("batch/dev", lambda r: r["batch_per_device"]),
    ("img/s", lambda r: r["img_s"]),
    ("scaling eff.", lambda r: r["scaling_efficiency"]),
    ("step ms", lambda r: r["step_ms"]),
    ("compute / exposed comm / bubble ms", split),
    ("largest", lambda r: r["largest_term"]),
    ("memory/device MB", memory),
    ("max batch/dev", lambda r: r["max_batch"]),
    ("with recompute", lambda r: r.get("max_batch_recompute", "")),
    ("error", error),
    ("extrapolated", lambda r: "yes" if r.get("extrapolated") == "1" else ""),
]


def table(rows):
    """(header, body) of the projected table, as report_html.table takes it."""
    return [t for t, _ in TABLE_COLUMNS], [[f(r) for _, f in TABLE_COLUMNS] for r in rows]


NOTE = ("Predicted by ddpbench --project from a one-device profile, not measured. error: the strategy's median "
        "error where the model was validated against measured runs; extrapolated: world more than 16x the "
        "largest world measured.")


def environment(profile):
    """The profile's own line: what was measured, where (ddpbench has read it;
    empty when it is not a JSON object)."""
    try:
        with open(profile) as f:
            p = json.load(f)
    except (OSError, ValueError):
        return ""
    keys = ("model", "batch_size", "precision", "device", "machine", "command")
    return " ".join(f"{k}={p[k]}" for k in keys if p.get(k) not in (None, "")) if isinstance(p, dict) else ""


def section(rows, png):
    """report_html.page's projection: (title, header, body, figure, note)."""
    return (f"Projected, not measured: {where(rows)}", *table(rows), png, NOTE)


def write_html(rows, png, path, environment_line):
    with open(path, "w") as f:
        f.write(report_html.page("ddpbench projection", environment_line, [], [], projection=section(rows, png)))


def counts(text):
    """'1,2,4' -> [1, 2, 4]; an argparse type."""
    if not re.fullmatch(r"\d+(,\d+)*", text) or any(int(n) < 1 for n in text.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of whole numbers >= 1")
    return text


def names(text):
    if not re.fullmatch(r"[a-z0-9_-]+(,[a-z0-9_-]+)*", text):
        raise argparse.ArgumentTypeError(f"{text!r}: not a comma-separated list of strategy names")
    return text


def parse_args(argv):
    argv, flags = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="project.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("profile", help="profile JSON written by ddpbench --calibrate=FILE")
    p.add_argument("--gpus-per-node", type=int, default=8, help="devices per node (default 8)")
    p.add_argument("--nodes", type=counts, default="1,2,4,8,64,512", help="node counts (default 1,2,4,8,64,512)")
    p.add_argument("--intra", default="nvlink4", help="link inside a node: a preset (nvlink4, pcie4, pcie5, "
                   "ib-ndr400, 100gbe, 25gbe) or measured, with overrides: measured,bw=500Mbit/s (default nvlink4)")
    p.add_argument("--inter", default="ib-ndr400", help="link between nodes, as --intra (default ib-ndr400)")
    p.add_argument("--strategies", type=names,
                   help="comma-separated (ddp,zero1,zero2,zero3,dp,mp,pmp); default: ddpbench's, those that can run")
    p.add_argument("--device-memory-gb", type=float, default=80.0,
                   help="memory of one device: the max batch column (default 80)")
    p.add_argument("--batch-size", type=int, help="per-device batch (default: the profile's)")
    p.add_argument("--out", default="results/projection", help="directory of the outputs (default results/projection)")
    p.add_argument("--bin", default="build/ddpbench", help="the ddpbench binary (default build/ddpbench)")
    args = p.parse_args(argv)
    if args.gpus_per_node < 1:
        p.error(f"--gpus-per-node={args.gpus_per_node}: must be 1 or more")
    if args.batch_size is not None and args.batch_size < 1:
        p.error(f"--batch-size={args.batch_size}: must be 1 or more")
    if not args.device_memory_gb > 0:
        p.error(f"--device-memory-gb={args.device_memory_gb}: must be more than 0")
    for f in flags:
        if f.split("=", 1)[0] in OWN_FLAGS:
            p.error(f"{f}: project.py gives ddpbench {f.split('=', 1)[0]} itself; use its own flag before --")
    args.flags = flags
    return args


def ddpbench_argv(args, csv_path):
    argv = [args.bin, f"--project={args.profile}", f"--project-csv={csv_path}", f"--nodes={args.nodes}",
            f"--gpus-per-node={args.gpus_per_node}", f"--intra={args.intra}", f"--inter={args.inter}",
            f"--device-memory-gb={args.device_memory_gb:g}"]
    if args.strategies:
        argv.append(f"--strategies={args.strategies}")
    if args.batch_size:
        argv.append(f"--batch-size={args.batch_size}")
    return argv + args.flags


def fail(message):
    print(f"project: error: {message}", file=sys.stderr)
    sys.exit(2)


def run_ddpbench(args, csv_path):
    """ddpbench's table to our stdout, its complaints to our stderr; a failure
    ends here with ddpbench's own exit code."""
    if os.path.exists(csv_path):
        os.remove(csv_path)  # an earlier run's rows are not this run's
    sys.stdout.flush()
    try:
        rc = subprocess.run(ddpbench_argv(args, csv_path)).returncode
    except OSError as e:
        fail(f"cannot run {args.bin}: {e.strerror} (build it: docs/build.md)")
    if rc != 0:
        sys.exit(rc if rc > 0 else 128 - rc)  # killed by a signal: the shell's 128 + signal


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not os.path.isfile(args.profile):
        fail(f"{args.profile}: no such profile file (write one with ddpbench --calibrate=FILE)")
    os.makedirs(args.out, exist_ok=True)
    csv_path, png, page = (os.path.join(args.out, f"projection.{ext}") for ext in ("csv", "png", "html"))
    run_ddpbench(args, csv_path)
    try:
        rows = load(csv_path)
    except ProjectionError as e:
        fail(f"{e} (ddpbench exited 0)")
    if not rows:
        fail(f"{csv_path}: no rows: ddpbench projected no strategy on these sizes")
    draw(rows, png)
    write_html(rows, png, page, environment(args.profile))
    print(f"\nrows in {csv_path}; figure {png}; page {page}")


if __name__ == "__main__":
    main()
