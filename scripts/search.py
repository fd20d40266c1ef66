#!/usr/bin/env python3
"""Which configuration should I run? `ddpbench --search` ranks strategies x
batch x strategy options by the performance model from one calibration
profile; this measures the model's first picks in interleaved rounds (as
scripts/compare.py does), names the measured winner with the command that
runs it, and says how well the model ranked what was measured (Kendall's
tau-b, and the regret of trusting its first pick).

    scripts/search.py --gpus=2 -- --device=cpu --width=16 --small-input --image-size=32 --steps=6 --warmup=2
    scripts/search.py --gpus=2 --profile=p.json --measure=5 --rounds=3 --budget-s=900 --memory-mb=400 -- --device=cpu
    scripts/search.py --gpus=2 --exhaustive --space='strategies=ddp,pmp;batch=16,32' -- --device=cpu --steps=10

Steps (each one's output in a log under <prefix>/):
  1. without --profile: ddpbench --calibrate=<prefix>.profile.json --strategy=ddp --gpus=G <workload>
  2. ddpbench --search=<profile> --gpus=G --search-csv=<prefix>.ranked.csv [--search-space=SPEC]
     [--cpu-device-memory-mb=M] <workload>; its failure ends here with its line and exit code
  3. the first --measure fitting configurations by rank (every fitting one with --exhaustive), each once
     per round, the order rotated each round; each run is `ddpbench <its flags> <workload>` (its flags win
     over the workload's) with --out/--run-id/--entry/--progress=off, and --cpu-device-memory-mb=M with
     --memory-mb (a configuration that does not fit then fails, exit 6, and is recorded as failed)

--budget-s counts the measuring only: a budget below one run's estimate (predicted step ms x (--steps +
--warmup, ddpbench's defaults 50 and 5 when absent) + 5 s) is refused before measuring; once the budget is
spent no further run starts, and the reports hold what was measured.

Outputs, <prefix> = <dir of --out>/search-<UTC time>:
  --out                      every measured row (ddpbench's columns), under the run id
  <prefix>.ranked.csv        ddpbench --search's table (ddpbench_py/search_rank.py RANKED_COLUMNS)
  <prefix>.search.csv        that table with the measured columns added: measured_img_s and
                             measured_peak_mem_mb (medians over the rounds), measured_runs, failed_runs,
                             model_error_pct (100 x (predicted_img_s / measured_img_s - 1))
  <prefix>.search-summary.csv  one row: SUMMARY_COLUMNS (Kendall tau-b over the measured configurations,
                             regret in percent, the model's first pick, the measured best, its command)
  <prefix>.search.html       the tables on one page; <prefix>.failures.csv when a run failed

Exit: 0; 1 when a measured run failed or nothing could be measured; 2 for a bad flag (one line);
ddpbench's own code when calibrating or ranking fails. Standard library only: runs from any python3.
"""
import argparse
import csv
import datetime
import os
import shlex
import sys
import time

import report  # noqa: E402  (scripts/report.py, beside this one: its tables)
from ddpbench_py import entries  # noqa: E402
from ddpbench_py import report_html  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402
from ddpbench_py import search_rank as S  # noqa: E402

# The flags this script gives ddpbench itself: not accepted after `--`.
OWN_FLAGS = ("--strategy", "--gpus", "--out", "--run-id", "--entry", "--progress", "--search", "--search-csv",
             "--search-space", "--calibrate", "--cpu-device-memory-mb")
# The flags of a measured run that are bookkeeping, not the configuration: left out of the printed command.
BOOKKEEPING = ("--out", "--run-id", "--entry", "--progress")
# ddpbench's --steps and --warmup when the workload gives none (app/cli.cpp, base/config.h).
DEFAULT_STEPS, DEFAULT_WARMUP, START_S = 50, 5, 5.0
SUMMARY_COLUMNS = ["run_id", "profile", "measured", "kendall_tau", "regret_pct", "model_first", "measured_best",
                   "best_img_s", "runs", "failed_runs", "stopped_by_budget", "command"]
NEXT_UNMEASURED = 3  # unmeasured configurations shown after the measured ones


class Parser(argparse.ArgumentParser):
    def error(self, message):
        """One line and exit 2: no usage block above it."""
        print(f"search: error: {message}", file=sys.stderr)
        sys.exit(2)


def fail(message, code=2):
    """search: error: <message> on stderr, and exit code."""
    print(f"search: error: {message}", file=sys.stderr)
    sys.exit(code)


def parse_args(argv):
    """(our flags, the workload flags after `--`) checked, as one namespace."""
    argv, flags = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = Parser(prog="search.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=2, help="devices of every configuration (default 2)")
    p.add_argument("--bin", default="build/ddpbench", help="the ddpbench binary (default build/ddpbench)")
    p.add_argument("--profile", help="profile JSON of ddpbench --calibrate (default: calibrate first)")
    p.add_argument("--space", help="ddpbench --search-space=SPEC (default: ddpbench's)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--measure", type=int, default=3, help="measure the first K fitting by rank (default 3)")
    how.add_argument("--exhaustive", action="store_true", help="measure every fitting configuration")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--budget-s", type=float, help="seconds of measuring; no run starts after them")
    p.add_argument("--out", default="results/search.csv", help="CSV the rows are appended to")
    p.add_argument("--memory-mb", type=int, help="each CPU device's memory: ddpbench --cpu-device-memory-mb")
    p.add_argument("--timeout-s", type=int, default=7200, help="seconds before one ddpbench is stopped")
    args = p.parse_args(argv)
    for name, value, ok, accepted in (("--gpus", args.gpus, args.gpus >= 1, "1 or more"),
                                      ("--measure", args.measure, args.measure >= 1, "1 or more"),
                                      ("--rounds", args.rounds, args.rounds >= 1, "1 or more"),
                                      ("--budget-s", args.budget_s, args.budget_s is None or args.budget_s > 0,
                                       "more than 0 seconds"),
                                      ("--memory-mb", args.memory_mb, args.memory_mb is None or args.memory_mb >= 1,
                                       "1 or more (MiB)"),
                                      ("--timeout-s", args.timeout_s, args.timeout_s >= 1, "1 or more")):
        if not ok:
            p.error(f"{name}={value:g}: must be {accepted}")
    for f in flags:
        if f.split("=", 1)[0] in OWN_FLAGS:
            p.error(f"{f}: search.py gives ddpbench {f.split('=', 1)[0]} itself; accepted after --: workload "
                    f"flags only (not {', '.join(OWN_FLAGS)}); use --gpus/--out/--space/--memory-mb/--profile")
    if args.profile and not os.path.isfile(args.profile):
        p.error(f"--profile={args.profile}: no such file (write one with ddpbench --calibrate=FILE, or leave "
                f"--profile out to calibrate first)")
    args.flags = flags
    return args


def flag_value(flags, name, default=None):
    """The value of --name=V or --name V in flags (the last one given), else default."""
    value = default
    for i, f in enumerate(flags):
        if f.startswith(name + "="):
            value = f.split("=", 1)[1]
        elif f == name and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value = flags[i + 1]
    return value


def without(flags, names):
    """flags less those named (as --name=V, or --name followed by its value)."""
    out, i = [], 0
    while i < len(flags):
        f = flags[i]
        if f.split("=", 1)[0] not in names:
            out.append(f)
        elif "=" not in f and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            i += 1  # its value
        i += 1
    return out


def run_argv(args, row, run_id):
    """The argv of one measured run: the candidate's flags win over the workload's."""
    own = shlex.split(row["flags"])
    strategy = flag_value(own, "--strategy", row["strategy"])
    own = without(own, ("--strategy",))
    names = {f.split("=", 1)[0] for f in own if f.startswith("--")}
    memory = [f"--cpu-device-memory-mb={args.memory_mb}"] if args.memory_mb else []
    # The search has its prediction: a run's own (a calibration after it) is left out unless asked for.
    expected = [] if flag_value(args.flags, "--expected") else ["--expected=off"]
    return [args.bin, *entries.ddpbench_args(strategy, [*own, *without(args.flags, names), *memory, *expected],
                                             args.out, run_id, row["entry"])]


def command(argv):
    """The shell line that runs one configuration again, bookkeeping flags left out."""
    return shlex.join(without(argv, BOOKKEEPING))


def steps_per_run(flags):
    """--steps + --warmup of the workload (ddpbench's defaults when absent)."""
    counts = [flag_value(flags, "--steps", str(DEFAULT_STEPS)), flag_value(flags, "--warmup", str(DEFAULT_WARMUP))]
    bad = [c for c in counts if not c.isdigit()]
    if bad:
        fail(f"--steps/--warmup={bad[0]} after --: not a whole number; accepted: --steps=N --warmup=N")
    return int(counts[0]) + int(counts[1])


def estimate_s(row, flags):
    """Seconds one run of row takes: predicted step x (steps + warmup) + the start."""
    return (R.num(row, "predicted_step_ms") or 0) * steps_per_run(flags) / 1000 + START_S


def run_step(args, argv, log, what):
    """Runs one ddpbench step (calibrate, search); a failure ends here with its line and exit code."""
    print(f"{what}: {shlex.join(argv)}  (log {log})", flush=True)
    rc, reason = entries.run_logged(argv, log, args.timeout_s)
    if rc is None:
        fail(f"{what}: {reason}" + (" (build it: docs/build.md)" if reason.startswith("cannot start") else ""),
             2 if reason.startswith("cannot start") else 1)
    if rc != 0:
        print(reason, file=sys.stderr)
        sys.exit(rc if rc > 0 else 128 - rc)  # killed by a signal: the shell's 128 + signal


def calibrate(args, prefix):
    """<prefix>.profile.json from ddpbench --calibrate on ddp."""
    path = prefix + ".profile.json"
    argv = [args.bin, f"--calibrate={path}", "--strategy=ddp", f"--gpus={args.gpus}", *args.flags]
    run_step(args, argv, os.path.join(prefix, "calibrate.log"), "calibrate")
    if not os.path.isfile(path):
        fail(f"{path}: ddpbench --calibrate exited 0 but wrote no profile", 1)
    return path


def rank(args, profile, prefix):
    """ddpbench --search's rows (<prefix>.ranked.csv)."""
    path = prefix + ".ranked.csv"
    argv = [args.bin, f"--search={profile}", f"--gpus={args.gpus}", f"--search-csv={path}"]
    argv += [f"--search-space={args.space}"] if args.space else []
    argv += [f"--cpu-device-memory-mb={args.memory_mb}"] if args.memory_mb else []
    run_step(args, argv + args.flags, os.path.join(prefix, "search.log"), "rank")
    try:
        return S.load_ranked(path)
    except S.SearchError as e:
        fail(f"{e} (ddpbench --search exited 0)", 1)


def check_budget(args, first):
    """Refuses a budget below one run of the first candidate (exit 2, one line)."""
    if args.budget_s is None:
        return
    need = estimate_s(first, args.flags)
    if args.budget_s < need:
        fail(f"--budget-s={args.budget_s:g}: below one run of {first['entry']}, estimated {need:.0f} s (predicted "
             f"step {first['predicted_step_ms']} ms x {steps_per_run(args.flags)} steps with warm-up + "
             f"{START_S:g} s); accepted: --budget-s>={need:.0f}, or leave it out")


def measure(args, candidates, run_id, prefix, clock=time.monotonic):
    """Each candidate once per round, the order rotated each round, none started past
    --budget-s -> (runs, failed, stopped by the budget)."""
    start, runs, failed, planned = clock(), 0, 0, args.rounds * len(candidates)
    for k in range(args.rounds):
        shift = k % len(candidates)
        for row in candidates[shift:] + candidates[:shift]:
            spent = clock() - start
            if args.budget_s is not None and spent > args.budget_s:
                print(f"budget: --budget-s={args.budget_s:g} spent ({spent:.0f} s) after {runs} of {planned} runs; "
                      f"no further run started, the tables hold what was measured", flush=True)
                return runs, failed, True
            argv = run_argv(args, row, run_id)
            log = os.path.join(prefix, f"{row['entry']}-r{k + 1}.log")
            rc, reason = entries.run_logged(argv, log, args.timeout_s)
            runs += 1
            print(f"round {k + 1}/{args.rounds} {row['entry']}: " +
                  ("ok" if rc == 0 else f"FAILED (exit {rc}): {reason}"), flush=True)
            if rc != 0:
                failed += 1
                entry = {"name": row["entry"], "strategy": flag_value(argv, "--strategy", row["strategy"]),
                         "gpus": flag_value(argv, "--gpus", args.gpus)}
                entries.record_failure(prefix + ".failures.csv", run_id, entry, rc, reason, argv)
    return runs, failed, False


def number(value, digits):
    """A cell: the number with digits decimals, empty for None."""
    return "" if value is None else f"{value:.{digits}f}"


def measured_cell(r):
    """The measured img/s, or FAILED when only failed runs were made."""
    if r["measured_img_s"] is None and r["failed_runs"]:
        return f"FAILED ({r['failed_runs']} run{'s' if r['failed_runs'] > 1 else ''})"
    return number(r["measured_img_s"], 2)


def validated(r):
    """'yes, +-8.0%' where the model was validated for the family, else 'no'."""
    return f"yes, +-{r['error_pct']}%" if r.get("validated") == "1" and r.get("error_pct") else \
        ("yes" if r.get("validated") == "1" else "no")


TABLE_COLUMNS = [
    ("rank", lambda r: r["rank"]),
    ("entry", lambda r: r["entry"]),
    ("predicted img/s", lambda r: r["predicted_img_s"]),
    ("predicted MB", lambda r: r["predicted_memory_mb"]),
    ("measured img/s median", measured_cell),
    ("measured MB median", lambda r: number(r["measured_peak_mem_mb"], 1)),
    ("model error %", lambda r: "" if r["model_error_pct"] is None else f"{r['model_error_pct']:+.1f}"),
    ("validated", validated),
]
FULL_COLUMNS = TABLE_COLUMNS + [("fits", lambda r: "yes" if r["fits"] == "1" else "NO"),
                                ("largest term", lambda r: r["largest_term"]), ("flags", lambda r: r["flags"]),
                                ("note", lambda r: r["note"])]


def shown(joined):
    """The rows a person reads: the measured ones, then the next few unmeasured, in the model's order."""
    tried = [r for r in S.ranked_order(joined) if r["measured_runs"] or r["failed_runs"]]
    rest = [r for r in S.ranked_order(joined) if r not in tried][:NEXT_UNMEASURED]
    return tried + rest


def table(rows, columns=TABLE_COLUMNS):
    """(header, body) as report.markdown_table and report_html.table take them."""
    return [t for t, _ in columns], [[f(r) for _, f in columns] for r in rows]


def ranking_line(summary):
    """ranking: Kendall tau <t> over <n> measured, regret <r%> (model's first pick, measured best)."""
    tau = "n/a" if summary["tau"] is None else f"{summary['tau']:.3f}"
    regret = "n/a" if summary["regret"] is None else f"{100 * summary['regret']:.1f}%"
    return (f"ranking: Kendall tau {tau} over {summary['n']} measured, regret {regret} "
            f"(model's first pick {summary['first']}, measured best {summary['best']})")


def write_csvs(prefix, summary, summary_row):
    """<prefix>.search.csv (joined rows) and <prefix>.search-summary.csv (one row)."""
    digits = {"measured_img_s": 2, "measured_peak_mem_mb": 1, "model_error_pct": 1}
    with open(prefix + ".search.csv", "w", newline="") as f:
        w = csv.DictWriter(f, S.RANKED_COLUMNS + S.MEASURED_COLUMNS, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows({**r, **{k: number(r[k], d) for k, d in digits.items()}} for r in summary["rows"])
    with open(prefix + ".search-summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, SUMMARY_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerow(summary_row)


def write_html(path, run_id, summary_row, summary, failures, environment):
    """One page: the summary, every ranked configuration with its measurements, the failed runs."""
    keys = ["model_first", "measured_best", "best_img_s", "kendall_tau", "measured", "regret_pct", "command"]
    sections = [("Summary", keys, [[summary_row[k] for k in keys]]),
                ("Ranked by the model, measured here", *table(S.ranked_order(summary["rows"]) +
                 [r for r in summary["rows"] if r["fits"] != "1"], FULL_COLUMNS))]
    if failures:
        sections.append(("Failed runs", *report.failure_table(failures)))
    with open(path, "w") as f:
        f.write(report_html.page(f"ddpbench search {run_id}", environment, sections, []))


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    run_id = "search-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    prefix = os.path.join(os.path.dirname(os.path.abspath(args.out)), run_id)
    os.makedirs(prefix, exist_ok=True)
    profile = args.profile or calibrate(args, prefix)
    ranked = rank(args, profile, prefix)
    order = S.ranked_order(ranked)
    if not order:
        fail(f"{prefix}.ranked.csv: no configuration fits and is ranked (fits=1 with a rank); nothing to measure", 1)
    candidates = order if args.exhaustive else order[:args.measure]
    check_budget(args, candidates[0])
    print(f"measuring {len(candidates)} of {len(order)} fitting configurations ({len(ranked) - len(order)} do "
          f"not fit) in {args.rounds} round{'s' if args.rounds > 1 else ''}", flush=True)
    runs, failed, stopped = measure(args, candidates, run_id, prefix)
    try:
        rows = [r for r in R.load([args.out]) if r.get("run_id") == run_id] if os.path.exists(args.out) else []
        failures = R.load_failures(prefix + ".csv")
    except R.RowsError as e:
        fail(str(e), 1)
    summary = S.summarize(ranked, rows, failures)
    best = next((r for r in summary["rows"] if r["entry"] == summary["best"]), None)
    line = command(run_argv(args, best, run_id)) if best else ""
    summary_row = {"run_id": run_id, "profile": profile, "measured": summary["n"],
                   "kendall_tau": number(summary["tau"], 3),
                   "regret_pct": "" if summary["regret"] is None else f"{100 * summary['regret']:.1f}",
                   "model_first": summary["first"], "measured_best": summary["best"] or "",
                   "best_img_s": number(best and best["measured_img_s"], 2), "runs": runs, "failed_runs": failed,
                   "stopped_by_budget": int(stopped), "command": line}
    write_csvs(prefix, summary, summary_row)
    environment = " ".join(filter(None, [report.environment(rows) if rows else "", f"profile={profile}",
                                         f"workload: {shlex.join(args.flags)}"]))
    write_html(prefix + ".search.html", run_id, summary_row, summary, failures, environment)
    print()
    print(report.markdown_table(*table(shown(summary["rows"]))))
    print()
    if best:
        print(f"winner: {best['entry']} measured {best['measured_img_s']:.2f} img/s")
        print(f"command: {line}")
    print(ranking_line(summary))
    print(f"\nrows in {args.out} (run_id {run_id}); tables {prefix}.search.csv, {prefix}.search-summary.csv; "
          f"page {prefix}.search.html; logs {prefix}/")
    if not rows:
        fail(f"no measured run wrote a row (see {prefix}/*.log)", 1)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
