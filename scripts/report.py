#!/usr/bin/env python3
"""Reports from ddpbench result rows (one night's CSV, or any rows):

  - the strategy table in the shape of the documents users compare us with
    (experiment, devices x nodes, throughput, memory per device, accuracy)
    plus ours (scaling efficiency, parity, pipeline bubble, communication
    hidden behind backward);
  - a scaling table per data-parallel strategy in seed 001's shape: one column
    per device count (lr, global batch, steps per epoch, time per epoch,
    throughput, scaling efficiency, loss, accuracy);
  - the entries that failed (scripts/nightly.py's <night>.failures.csv);
  - figures and one self-contained HTML page; the regression gate;
  - with --projection, a projected section after the measured one:
    scripts/project.py's table and figure of ddpbench --project's predictions.

    scripts/report.py results/*.csv                      # markdown to stdout
    scripts/report.py --format=csv results/a.csv         # strategy table as CSV
    scripts/report.py night.csv --markdown=n.md --html=n.html --figures=n/ --history=results/nightly
    scripts/report.py night.csv --against=results/nightly [--k=3]   # gate: exit 1 on a regression
    scripts/report.py night.csv --html=n.html --projection=results/projection/projection.csv
"""
import argparse
import csv
import math
import os
import statistics
import sys
import tempfile

from ddpbench_py import gate  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402

TRAIN_IMAGES = {"mnist": 60000, "fashion-mnist": 60000, "cifar10": 50000, "cifar100": 50000}
DATA_PARALLEL = ("dp", "ddp", "zero1")


def cell(value, digits=None):
    if value is None or value == "":
        return ""
    return f"{value:.{digits}f}" if digits is not None else str(value)


def parity(row):
    if not row.get("parity_max_abs_diff"):
        return ""
    return row["parity_max_abs_diff"] + (" FAIL" if row.get("parity_ok") == "false" else "")


def detail(row):
    keys = ("split", "schedule", "chunks", "zero_reduce", "param_mb", "grad_mb", "optimizer_state_mb",
            "zero_expected_mb", "units_gathered_max", "compression", "amp")
    return " ".join(f"{k}={row[k]}" for k in keys
                    if row.get(k) and not (k in ("amp", "compression") and row[k] in ("off", "none")))


STRATEGY_COLUMNS = [
    ("experiment", R.experiment),
    ("devices x nodes", R.devices_by_nodes),
    ("device", R.device_kind),
    ("model", lambda r: f"{r.get('model', '')} w{r.get('width', '')}"),
    ("batch/dev", lambda r: r.get("per_device_batch", "")),
    ("img/s", lambda r: r.get("throughput_img_s", "")),
    ("memory/device MB", lambda r: r.get("mem_per_device_mb", "")),
    ("accuracy", lambda r: r.get("accuracy", "")),
    ("scaling eff.", lambda r: r.get("scaling_efficiency", "")),
    ("parity |dw|", parity),
    ("bubble", lambda r: r.get("bubble_measured", "")),
    ("comm. hidden", lambda r: r.get("allreduce_hidden_frac", "")),
    ("step p50 ms", lambda r: r.get("step_ms_p50", "")),
    ("detail", detail),
]


def strategy_table(rows, columns=STRATEGY_COLUMNS):
    return [t for t, _ in columns], [[f(r) for _, f in columns] for r in rows]


def rounds_summary(rows):
    """One row per entry measured in several rounds (scripts/compare.py): the
    row of its median round, with throughput_img_s and step_ms_p50 the medians
    over the rounds, throughput_spread their min-max and rounds their count."""
    out = []
    for group in group_rows(rows, ("entry", "strategy", "gpus")):
        tputs = sorted(R.num(r, "throughput_img_s") for r in group if R.num(r, "throughput_img_s"))
        steps = [R.num(r, "step_ms_p50") for r in group if R.num(r, "step_ms_p50")]
        if not tputs:
            continue
        mid = statistics.median(tputs)
        row = dict(min(group, key=lambda r: abs((R.num(r, "throughput_img_s") or 0) - mid)))
        row["throughput_img_s"] = f"{mid:.2f}"
        row["step_ms_p50"] = f"{statistics.median(steps):.1f}" if steps else ""
        row["throughput_spread"] = f"{tputs[0]:.2f}-{tputs[-1]:.2f} (+-{50 * (tputs[-1] - tputs[0]) / mid:.0f}%)"
        row["rounds"] = str(len(tputs))
        out.append(row)
    return out


def _with_rounds(columns):
    out = []
    for title, f in columns:
        if title == "img/s":
            out += [("img/s median", f), ("spread min-max", lambda r: r.get("throughput_spread", "")),
                    ("rounds", lambda r: r.get("rounds", ""))]
        elif title == "step p50 ms":
            out.append(("step p50 ms median", f))
        else:
            out.append((title, f))
    return out


ROUNDS_COLUMNS = _with_rounds(STRATEGY_COLUMNS)


# A scaling table's rows agree on the workload and the strategy's options; its
# single-device column on the workload only (single has no such options).
WORKLOAD_KEYS = ("model", "width", "dataset", "image_size", "per_device_batch", "amp", "device", "small_input",
                 "optimizer")
OPTION_KEYS = ("compression", "zero_reduce")


def same_workload(a, b, keys=WORKLOAD_KEYS + OPTION_KEYS):
    return all(a.get(k) == b.get(k) for k in keys)


def epoch_figures(row):
    """(steps per epoch, seconds per epoch) on a real dataset's training set."""
    images = TRAIN_IMAGES.get(row.get("dataset", ""))
    batch, tput = R.num(row, "global_batch"), R.num(row, "throughput_img_s")
    if not images or not batch or not tput:
        return "", ""
    return str(math.ceil(images / batch)), f"{images / tput:.1f}"


def lr(row):
    return f"{float(row['lr']):.3g}" if row.get("lr") else ""


SCALING_ROWS = [
    ("devices x nodes", R.devices_by_nodes),
    ("learning rate", lr),
    ("global batch", lambda r: r.get("global_batch", "")),
    ("steps per epoch", lambda r: epoch_figures(r)[0]),
    ("time per epoch (s)", lambda r: epoch_figures(r)[1]),
    ("throughput (img/s)", lambda r: r.get("throughput_img_s", "")),
    ("scaling efficiency", lambda r: "1.00" if r.get("strategy") == "single" else r.get("scaling_efficiency", "")),
    ("final loss", lambda r: r.get("final_loss", "")),
    ("accuracy", lambda r: r.get("accuracy", "")),
]


def group_rows(rows, keys):
    """Rows in groups that agree on `keys`, in order of first appearance."""
    groups = []
    for r in rows:
        group = next((g for g in groups if same_workload(g[0], r, keys)), None)
        if group:
            group.append(r)
        else:
            groups.append([r])
    return groups


def by_devices(rows):
    """The last row measured at each (devices, nodes), in increasing order."""
    columns = {(R.devices(r), R.nodes(r)): r for r in rows}
    return [columns[k] for k in sorted(columns)]


def scaling_tables(rows):
    """One table per data-parallel strategy and workload: columns by devices."""
    tables = []
    for strategy in DATA_PARALLEL:
        for group in group_rows([r for r in rows if r.get("strategy") == strategy], WORKLOAD_KEYS + OPTION_KEYS):
            base = [r for r in rows if r.get("strategy") == "single" and same_workload(r, group[0], WORKLOAD_KEYS)]
            ordered = by_devices(base[-1:] + group)
            g = group[0]
            options = " ".join(f"{k}={g[k]}" for k in ("optimizer", "zero_reduce", "compression")
                               if g.get(k) and g[k] not in ("sgd", "reduce-scatter", "none"))
            title = (f"{strategy} scaling: {g.get('model')} w{g.get('width')}, {g.get('dataset')} "
                     f"{g.get('image_size')} px, {g.get('per_device_batch')} images per device, "
                     f"{R.device_kind(g)}{', ' + options if options else ''}")
            header = [""] + [f"{R.devices(r)} device{'s' if R.devices(r) > 1 else ''}" for r in ordered]
            body = [[name] + [f(r) for r in ordered] for name, f in SCALING_ROWS]
            tables.append((title, header, body))
    return tables


def epoch_time(row):
    return R.num(row, "mean_epoch_s")


ANSWER_ROWS = [
    ("devices x nodes", R.devices_by_nodes),
    ("learning rate", lr),
    ("global batch", lambda r: r.get("global_batch", "")),
    ("steps per epoch", lambda r: r.get("steps_per_epoch", "")),
    ("mean epoch time (s)", lambda r: r.get("mean_epoch_s", "")),
    ("epochs reached", lambda r: r.get("epochs_completed", "")),
    ("best validation loss", lambda r: r.get("best_val_loss", "")),
    ("test loss", lambda r: r.get("test_loss", "")),
    ("top-1 test accuracy", lambda r: r.get("accuracy", "")),
    ("time to target (s)", lambda r: r.get("time_to_target_s", "")),
    ("stopped by", lambda r: r.get("stop_reason", "")),
]


def answer_tables(rows):
    """Seed 001's table: runs that trained to an answer (a time budget, a target
    or epochs), one column per device count, scaling efficiency from the
    measured epoch times (T1 / (N x TN)), as seed 001 computes it."""
    runs = [r for r in rows if r.get("stop_reason") and r.get("epochs_completed")]
    tables = []
    for group in group_rows(runs, WORKLOAD_KEYS + ("time_budget_s", "target_accuracy")):
        ordered = by_devices(group)
        base = ordered[0] if R.devices(ordered[0]) == 1 else None

        def efficiency(r):
            if not base or not epoch_time(base) or not epoch_time(r):
                return ""
            return f"{epoch_time(base) / (R.devices(r) * epoch_time(r)):.2f}"
        g = group[0]
        budget = f"{float(g['time_budget_s']):g} s budget" if g.get("time_budget_s") else "no budget"
        title = (f"Training to an answer: {g.get('model')} w{g.get('width')}, {g.get('dataset')}, "
                 f"{g.get('per_device_batch')} images per device, {budget}, {R.device_kind(g)}")
        header = [""] + [f"{R.devices(r)} x {r.get('strategy')}"
                         + (" (oversubscribed)" if r.get("oversubscribed") == "true" else "") for r in ordered]
        body = [[name] + [f(r) for r in ordered] for name, f in ANSWER_ROWS[:6]]
        body.append(["scaling efficiency"] + [efficiency(r) for r in ordered])
        body += [[name] + [f(r) for r in ordered] for name, f in ANSWER_ROWS[6:]
                 if any(f(r) for r in ordered)]  # e.g. no target: no time-to-target row
        tables.append((title, header, body))
    return tables


def failure_table(failures):
    header = ["entry", "strategy", "devices x nodes", "exit", "why"]
    return header, [[f["entry"], f["strategy"], f"{f['gpus']} x {f['nodes']}", f["exit_code"], f["reason"]]
                    for f in failures]


def markdown_table(header, body):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |" for cells in body]
    return "\n".join(lines)


def sections(rows, failures):
    """[(title, header, body)] of every table of the report."""
    out = [("Strategies", *strategy_table(rows))]
    out += scaling_tables(rows)
    out += answer_tables(rows)
    if failures:
        out.append(("Failed entries", *failure_table(failures)))
    return out


def environment(rows):
    r = rows[-1]
    parts = [f"{k}={r.get(k)}" for k in ("run_id", "git_sha", "host", "torch_version", "cuda_version",
                                         "nccl_version", "driver_version", "device_name", "cpu_isa", "machine_id") if r.get(k)]
    return " ".join(parts)


def markdown_projected(title, header, body, image, note):
    """The projected section as markdown (its figure linked when it has one)."""
    text = ["", f"### {title}", "", note, "", markdown_table(header, body), ""]
    return text + ([f"![{os.path.basename(image)}]({os.path.basename(image)})"] if image else [])


def markdown(rows, failures, images=(), gate_lines=(), tables=None, projected=None):
    """The report as markdown; images are named by file name (they sit beside
    it); projected: report_html.projected()'s arguments, after the rest."""
    text = [f"Environment: {environment(rows)}", ""]
    if gate_lines:
        text += ["### Regression gate", "", "```", *gate_lines, "```", ""]
    for title, header, body in sections(rows, failures) if tables is None else tables:
        text += [f"### {title}", "", markdown_table(header, body), ""]
    text += [f"![{os.path.basename(p)}]({os.path.basename(p)})" for p in images]
    if projected:
        text += markdown_projected(*projected)
    return "\n".join(text).rstrip() + "\n"


def run_gate(args, rows, failures):
    skipped = []
    history = R.load_history(args.against, rows, skipped)
    for why in skipped:
        print(f"skipped  {why}")
    limits = gate.Limits(k=args.k, floor=args.noise_floor, mem_factor=args.mem_factor, acc_tol=args.acc_tol,
                         vs_expected=args.vs_expected, memory_vs_expected=args.memory_vs_expected,
                         expected_fails=args.expected_fails, rule=args.rule, min_history=args.min_history,
                         confirm=args.confirm, streak=args.streak, streak_k=args.streak_k,
                         alpha=args.alpha, min_change=args.min_change, recent=args.recent,
                         matrix=args.matrix or "MATRIX")
    lines, regressions = gate.check(rows, history, failures, limits)
    for line in lines:
        print(line)
    nights = len({h["run_id"] for h in history})
    print(f"gate: {len(rows)} row{'s' if len(rows) != 1 else ''} against {nights} earlier "
          f"night{'s' if nights != 1 else ''} in {args.against}: {regressions} regression{'s' if regressions != 1 else ''}")
    return 1 if regressions else 0


def load_projection(path):
    """The rows of a ddpbench --project-csv file (scripts/project.py's
    projection.csv); a RowsError names a file that is not one or is empty."""
    import project
    try:
        rows = project.load(path)
    except project.ProjectionError as e:
        raise R.RowsError(str(e))
    if not rows:
        raise R.RowsError(f"{path}: no rows")
    return rows


def projected_section(projection, figures=None):
    """report_html.projected()'s arguments for the rows of a projection; its
    figure drawn to <figures>_projection.png (none without a prefix)."""
    import project
    return project.section(projection, project.draw(projection, figures + "_projection.png") if figures else None)


def write_reports(rows, failures, title, tables, markdown_path=None, html_path=None, figures=None,
                  history_dir=None, gate_lines=(), projection=None):
    """The markdown file, figures (<figures>_*.png) and self-contained HTML page
    of a set of rows; `tables` is sections()'s list; `projection` the rows of
    a projection (load_projection), a projected section after the measured
    ones. The nightly job and scripts/compare.py both write theirs through here."""
    images = []
    history = R.load_history(history_dir, rows) if history_dir else []
    if history:
        from ddpbench_py import history_page
        tables = [*tables, history_page.section(history_page.entry_histories(rows, history))]
    if figures:
        from ddpbench_py import figures as plot_results
        images = plot_results.night_figures(rows, history, figures)
    with tempfile.TemporaryDirectory() as tmp:  # the projection's figure, for the HTML, without --figures
        projected = projected_section(projection, figures or os.path.join(tmp, "report")) if projection else None
        if markdown_path:
            beside = projected_section(projection) if projection and not figures else projected  # no temp link
            with open(markdown_path, "w") as f:
                f.write(markdown(rows, failures, images, gate_lines, tables, beside))
        if html_path:
            from ddpbench_py import report_html
            with open(html_path, "w") as f:
                f.write(report_html.page(title, environment(rows), tables, images, gate_lines, projected))


def write_outputs(args, rows, failures, projection=None):
    gate_lines = open(args.gate_log).read().splitlines() if args.gate_log else []
    write_reports(rows, failures, f"ddpbench night {rows[0].get('run_id') or ''}", sections(rows, failures),
                  args.markdown, args.html, args.figures, args.history, gate_lines, projection)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="ddpbench results CSV files")
    p.add_argument("--format", choices=["markdown", "csv"], default="markdown", help="stdout format")
    p.add_argument("--markdown", help="write the markdown report to this file")
    p.add_argument("--html", help="write the self-contained HTML page to this file")
    p.add_argument("--figures", help="path prefix of the PNG figures (<prefix>_throughput.png ...)")
    p.add_argument("--history", help="directory of earlier nights (history figure)")
    p.add_argument("--against", help="gate: directory of earlier nights; exit 1 on a regression")
    p.add_argument("--gate-log", help="the gate's output for this night, shown at the top of md/HTML")
    p.add_argument("--projection", help="a ddpbench --project-csv file (scripts/project.py's projection.csv): "
                   "its table (and figure, in the HTML and --figures) in a projected section")
    p.add_argument("--k", type=float, help="gate: one bad night's bound median - k x spread (default 3)")
    p.add_argument("--rule", choices=["changepoint", "fixed"], default="changepoint",
                   help="gate: change points and each entry's own noise (default), or the former fixed 5%% floor")
    p.add_argument("--confirm", type=int, default=2,
                   help="changepoint rule: nights in a row (tonight included) the one-bad-night rule needs (default 2)")
    p.add_argument("--streak", type=int, default=3,
                   help="changepoint rule: a sustained loss, this many nights in a row each beyond --streak-k x "
                        "the entry's spread, whatever its worst earlier night (default 3; 0: off)")
    p.add_argument("--streak-k", type=float, default=4.0,
                   help="changepoint rule: the sustained loss's bound median - streak-k x spread (default 4)")
    p.add_argument("--min-history", type=int, default=5,
                   help="gate: earlier nights an entry needs for the changepoint rule (fewer: not enough history)")
    p.add_argument("--alpha", type=float, default=0.01, help="gate: a change point's largest corrected p-value")
    p.add_argument("--min-change", type=float, default=0.02,
                   help="gate: least size of a change point, as a fraction of the level before it")
    p.add_argument("--recent", type=int, default=3,
                   help="gate: a change point alarms while its first bad night is among this many latest nights")
    p.add_argument("--matrix", help="gate: the nightly matrix file, named in the printed bisect command")
    p.add_argument("--vs-expected", type=float, default=0.8,
                   help="gate: flag rows whose vs_expected is below this (0: never)")
    p.add_argument("--memory-vs-expected", type=float, default=0.25,
                   help="gate: flag rows whose peak memory is off its prediction by more than this fraction (0: never)")
    p.add_argument("--expected-fails", action="store_true",
                   help="gate: a row flagged slower than expected, or off its predicted memory, counts as a regression")
    p.add_argument("--noise-floor", type=float,
                   help="gate: least spread, as a fraction of the median (default 0.05 with --rule=fixed, "
                        "0.005 with the changepoint rule)")
    p.add_argument("--mem-factor", type=float, default=1.05, help="gate: peak memory above factor x reference")
    p.add_argument("--acc-tol", type=float, default=0.02, help="gate: accuracy below reference - tol")
    args = p.parse_args()
    if args.confirm < 1:
        p.error(f"--confirm={args.confirm}: must be at least 1 (tonight)")
    if args.streak < 0 or args.streak == 1:
        p.error(f"--streak={args.streak}: must be 0 (off) or at least 2 nights")
    if not args.streak_k > 0:
        p.error(f"--streak-k={args.streak_k}: must be above 0")
    if args.min_history < 2:
        p.error(f"--min-history={args.min_history}: must be at least 2 (a spread needs two nights)")
    if not 0 < args.alpha < 1:
        p.error(f"--alpha={args.alpha}: must be between 0 and 1")
    if args.recent < 1:
        p.error(f"--recent={args.recent}: must be at least 1")
    for name in ("k", "noise_floor", "acc_tol", "min_change"):
        if (getattr(args, name) or 0) < 0:
            p.error(f"--{name.replace('_', '-')}={getattr(args, name)}: must be >= 0")
    if args.mem_factor < 1:
        p.error(f"--mem-factor={args.mem_factor}: must be >= 1")
    return args


def main():
    args = parse_args()
    try:
        rows = R.load(args.files)
    except R.RowsError as e:
        sys.exit(f"report: {e}")
    if not rows:
        sys.exit("report: no rows in " + ", ".join(args.files))
    failures = R.load_failures(args.files[0]) if len(args.files) == 1 else []
    if args.against:
        sys.exit(run_gate(args, rows, failures))
    try:
        projection = load_projection(args.projection) if args.projection else None
    except R.RowsError as e:
        sys.exit(f"report: {e}")
    if args.markdown or args.html or args.figures:
        write_outputs(args, rows, failures, projection)
    if args.format == "csv":
        header, body = strategy_table(rows)
        w = csv.writer(sys.stdout)
        w.writerow(header)
        w.writerows(body)
    else:
        sys.stdout.write(markdown(rows, failures, projected=projected_section(projection) if projection else None))


if __name__ == "__main__":
    main()
