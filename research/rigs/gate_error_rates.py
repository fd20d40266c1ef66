#!/usr/bin/env python3
"""The nightly gate's error rates, measured on real nights of this machine
(a pool from research/rigs/gate_pool.py) resampled into many histories. A
night of the pool is one file: an entry's rows in it are its launches (one
with gate_pool.py --launches=1). Histories are built of whole measured nights,
or with --launches=L of nights of L launches each drawn from all of the
entry's launches of that variant (a projection: it takes launches of
different nights to be as alike as launches of one night):

  false alarms  histories of NIGHTS clean nights, each night drawn with
                replacement from the entry's clean nights of the pool; the
                gate runs on every night from the (min_history + 1)-th on
                against the nights before it; an alarm is any regression it
                counts for the entry that night. -> alarms per 100 entry-nights.
  detection     CLEAN_BEFORE clean nights drawn as above, then AFTER nights
                drawn from the entry's nights with the injected delay of PCT%
                of its step; detected within n nights when the gate counts a
                regression on one of the first n slowed nights.

The same histories (one seed per rule) go through the changepoint rule
(default limits, and variants of its one-bad-night and sustained-loss parts) and the former fixed rule
(median - 3 x max(1.4826 MAD, 5%)). Then the whole real
history of each entry (its clean nights in the order they ran, then its d10
nights) goes through the gate night by night, as a check. Prints a markdown
table; --real-dir writes that real history as nightly CSVs (one per night)
for the report's history page.

    research/rigs/gate_error_rates.py /tmp/pool --trials=300 --seed=1
"""
import argparse
import collections
import csv
import glob
import os
import random
import re
import statistics

from ddpbench_py import gate
from ddpbench_py import rows as R

NIGHTS, CLEAN_BEFORE, AFTER = 20, 12, 3


def first_timestamp(path):
    """When the night began (its first row's timestamp: files' own times do not survive a checkout)."""
    with open(path, newline="") as f:
        return min((r.get("timestamp", "") for r in csv.DictReader(f)), default="")


def load_pool(directory, reference=True):
    """{variant: {entry: [night, ...]}}, a night the list of the entry's rows (launches) in one
    file, in the order the nights ran; variant 'clean' merges clean0, clean1..."""
    pool = collections.defaultdict(lambda: collections.defaultdict(list))
    paths = sorted((p for p in glob.glob(os.path.join(directory, "*-r*.csv")) if not p.endswith(".reference.csv")),
                   key=first_timestamp)
    for path in paths:
        variant = re.sub(r"^clean\d+$", "clean", os.path.basename(path).split("-r")[0])
        night = collections.defaultdict(list)
        rows = [r for r in csv.DictReader(open(path, newline="")) if r.get("throughput_img_s")]
        for row in R.attach_reference(path, rows) if reference else rows:
            night[row["entry"]].append(row)
        for entry, rows in night.items():
            pool[variant][entry].append(rows)
    return pool


class Draw:
    """Draws a night of an entry from a list of measured nights: a whole one, or
    `launches` launches from all of them."""

    def __init__(self, rng, launches):
        self.rng, self.launches = rng, launches

    def __call__(self, nights):
        if not self.launches:
            return self.rng.choice(nights)
        every = [r for n in nights for r in n]
        return [self.rng.choice(every) for _ in range(self.launches)]


def history(nights):
    """The nights (lists of rows) as consecutive nights h00, h01, ... (copies: run id and timestamp renumbered)."""
    return [[dict(r, run_id=f"h{i:02d}", timestamp=f"2000-01-01T00:00:{i:02d}Z") for r in n] for i, n in enumerate(nights)]


def alarms(nights, limits, first):
    """[night index] on which the gate counts a regression, judging nights[first:] one by one."""
    return [i for i in range(first, len(nights))
            if gate.check(nights[i], [r for n in nights[:i] for r in n], [], limits)[1]]


def without_streak(**kw):
    return gate.Limits(streak=0, **kw)


# Every rule but the ones marked "+ streak" leaves the sustained-loss part (3 nights in a row
# beyond 4 x the spread, whatever the worst earlier night: gate.Limits.streak) out.
RULES = {"changepoint (the shipped default: k=3, 2 nights in a row, + streak)": gate.Limits(),
         "changepoint, k=5 (the former default, + streak)": gate.Limits(k=5, confirm=1),
         "changepoint, k=5": without_streak(k=5, confirm=1),
         "changepoint, k=3": without_streak(k=3, confirm=1),
         "changepoint, k=3, 2 nights in a row": without_streak(k=3, confirm=2),
         "changepoint, k=3, 2 nights in a row, + streak (k=4)": gate.Limits(k=3, confirm=2),
         "changepoint, k=3, 2 nights in a row, + streak (k=3.5)": gate.Limits(k=3, confirm=2, streak_k=3.5),
         "changepoint, k=3, 2 nights in a row, + streak (k=4.5)": gate.Limits(k=3, confirm=2, streak_k=4.5),
         "changepoint, k=2, 2 nights in a row": without_streak(k=2, confirm=2),
         "changepoint, k=2, 3 nights in a row": without_streak(k=2, confirm=3),
         "changepoint, k=2, 2 nights in a row, not beyond the worst": without_streak(k=2, confirm=2, beyond_worst=False),
         "changepoint, k=3, 2 nights in a row, not beyond the worst": without_streak(k=3, confirm=2, beyond_worst=False),
         "changepoint, k=2, 3 nights in a row, not beyond the worst": without_streak(k=2, confirm=3, beyond_worst=False),
         "changepoint, k=4, 2 nights in a row, not beyond the worst": without_streak(k=4, confirm=2, beyond_worst=False),
         "changepoint, k=3, 2 nights in a row, changes >= 3%": without_streak(k=3, confirm=2, min_change=0.03),
         "change points only (no one-night rule)": without_streak(k=float("inf"), confirm=1),
         "fixed (former)": gate.Limits(rule="fixed", confirm=1)}


def false_alarm_rate(pool, draw, trials, limits):
    flagged = judged = 0
    for entry, clean in pool["clean"].items():
        for _ in range(trials):
            nights = history([draw(clean) for _ in range(NIGHTS)])
            first = limits.min_history if limits.rule != "fixed" else 1
            flagged += len(alarms(nights, limits, first))
            judged += NIGHTS - first
    return 100 * flagged / judged, judged


def detection(pool, draw, trials, limits, variant):
    """{n: share of trials detected within n slowed nights}, nights-to-detect median-ish list."""
    within = collections.Counter()
    total = 0
    for entry, clean in pool["clean"].items():
        slow = pool[variant].get(entry)
        if not slow:
            continue
        for _ in range(trials):
            nights = history([draw(clean) for _ in range(CLEAN_BEFORE)] + [draw(slow) for _ in range(AFTER)])
            got = alarms(nights, limits, CLEAN_BEFORE)
            total += 1
            if got:
                within[got[0] - CLEAN_BEFORE + 1] += 1
    return {n: 100 * sum(within[k] for k in range(1, n + 1)) / total for n in range(1, AFTER + 1)}, total


def real_histories(pool, limits):
    """Per entry: the nights (of the whole real history) on which the gate alarmed."""
    out = {}
    for entry, clean in pool["clean"].items():
        nights = history(clean + pool["d10"].get(entry, []))
        out[entry] = (len(clean), len(nights), alarms(nights, limits, limits.min_history))
    return out


def write_real(pool, directory):
    """Each night of the real d10 histories as <directory>/hNN.csv (written afresh), all entries' rows in it."""
    os.makedirs(directory, exist_ok=True)
    by_night = collections.defaultdict(list)
    for entry, clean in pool["clean"].items():
        for night in history(clean + pool["d10"].get(entry, [])):
            by_night[night[0]["run_id"]] += night
    for night, rows in by_night.items():
        with open(os.path.join(directory, f"{night}.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def night_value(night):
    return statistics.median(float(r["throughput_img_s"]) for r in night)


def night_median(nights):
    return statistics.median(night_value(n) for n in nights)


def spread_line(nights, what, units):
    """'<n> <what>s: median M img/s, 1.4826 MAD S% of it, range a-b' of the units' values."""
    values = sorted(night_value(u) for u in units)
    median = statistics.median(values)
    spread = 1.4826 * statistics.median(abs(v - median) for v in values)
    return (f"{len(values)} {what}es" if what.endswith("h") else f"{len(values)} {what}s") + \
        f" median {median:.1f} img/s, 1.4826 MAD {100 * spread / median:.1f}% of it, range {values[0]:.0f}-{values[-1]:.0f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pool")
    p.add_argument("--trials", type=int, default=300, help="histories per entry and case")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--real-dir", help="write the real d10 history here, one CSV per night")
    p.add_argument("--launches", type=int, help="nights of this many launches drawn from all launches (a projection)")
    p.add_argument("--per-entry", action="store_true", help="a table per entry too")
    p.add_argument("--no-reference", action="store_true", help="leave the reference runs out (the absolute figures gated)")
    p.add_argument("--rule", action="append", default=[],
                   help="only the rules whose name contains this text (repeatable; default: every rule)")
    args = p.parse_args()
    if args.rule:
        for name in [n for n in RULES if not any(r in n for r in args.rule)]:
            del RULES[name]
        if not RULES:
            p.error(f"--rule={args.rule}: no rule's name contains it")
    pool = load_pool(args.pool, reference=not args.no_reference)
    sizes = {e: len(v) for e, v in pool["clean"].items()}
    print(f"pool {args.pool}: clean nights per entry {sizes}; " +
          ", ".join(f"{v} {len(next(iter(pool[v].values()), []))}" for v in sorted(pool) if v != "clean"))
    for entry, clean in pool["clean"].items():
        print(f"{entry}: " + spread_line(clean, "launch", [[r] for n in clean for r in n]) + "; " +
              spread_line(clean, "night", clean) + "; injected nights' median / clean median: " +
              ", ".join(f"{v} {night_median(pool[v][entry]) / night_median(clean):.2f}"
                        for v in sorted(pool) if v != "clean" and entry in pool[v]))
    how = f"nights of {args.launches} launches drawn from all launches" if args.launches else "whole measured nights"
    print(f"resampled ({how}): {args.trials} histories per entry and case, seed {args.seed}; {NIGHTS} nights for "
          f"false alarms, {CLEAN_BEFORE} clean + {AFTER} slowed for detection\n")
    table(pool, args)
    if args.per_entry:
        for entry in list(pool["clean"]):
            print(f"\n{entry} alone:\n")
            table({v: {entry: by[entry]} for v, by in pool.items() if entry in by}, args)
    print("\nWhole real histories (clean nights in the order they ran, then the d10 nights):")
    for name, limits in RULES.items():
        for entry, (clean, total, got) in real_histories(pool, limits).items():
            print(f"  {name:38s} {entry}: {clean} clean + {total - clean} d10 nights; alarms on nights "
                  f"{[i + 1 for i in got]} (slowed from night {clean + 1})")
    if args.real_dir:
        write_real(pool, args.real_dir)


def table(pool, args):
    """The markdown table of every rule's rates on the pool."""
    print("| rule | false alarms / 100 entry-nights | " +
          " | ".join(f"{v}: within 1 / 2 / 3 nights" for v in sorted((v for v in pool if v != "clean"), key=lambda v: int(v[1:]))) + " |")
    print("|---|---|" + "---|" * (len(pool) - 1))
    for name, limits in RULES.items():
        draw = Draw(random.Random(args.seed), args.launches)
        fa, judged = false_alarm_rate(pool, draw, args.trials, limits)
        cells = [f"{fa:.2f} ({judged} entry-nights)"]
        for v in sorted((v for v in pool if v != "clean"), key=lambda v: int(v[1:])):
            d, total = detection(pool, draw, args.trials, limits, v)
            cells.append(" / ".join(f"{d[n]:.0f}%" for n in (1, 2, 3)) + f" ({total})")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
