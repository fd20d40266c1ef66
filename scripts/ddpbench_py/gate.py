"""The regression gate: tonight's rows against earlier nights' rows of the
same matrix entry and workload (rows.workload). With at least min_history
earlier nights, throughput, step time p50 and peak memory are watched over
the nights (rule "changepoint", the default):

  a change point  (ddpbench_py/changepoints.py) whose first bad night is one
                  of the last `recent` nights, the wrong way by at least
                  min_change: named with its size, confidence, the last good
                  and first bad night, their git revisions and the
                  scripts/bisect_slow.py command that finds the commit;
  one bad night   throughput below (step p50 above) the median of the earlier
                  nights by more than k x that entry's own night-to-night
                  spread (1.4826 x MAD, at least floor x median), and worse
                  than every earlier night (a shared machine's nights have
                  heavier tails than a MAD sees);
  a sustained loss `streak` nights in a row (3), each beyond the median by
                  streak_k (4) x that spread, whatever the worst earlier
                  night: a 5% loss that one low earlier night would hide
                  from the one-bad-night rule is caught on its third night.

A night run with a reference build (scripts/nightly.py --reference-bin:
the same entry from a pinned build, launched interleaved with tonight's) also
has throughput_vs_reference, tonight's throughput over the reference's, in
which the machine's own drift cancels; where tonight has it, that ratio is
gated and the absolute throughput and step time are printed but not counted.

With fewer nights the entry is "not enough history" (not a regression). Rule
"fixed" is the former one: throughput < median - k x max(1.4826 x MAD,
0.05 x median). Beside them, on any history:

  peak memory > mem_factor x the history's median;
  parity      failed tonight (parity_ok false);
  accuracy    < the history's median - acc_tol;
  the entry   failed tonight (scripts/nightly.py recorded it).

Separately, any row of tonight (with or without history) whose vs_expected
(measured over the throughput its own parts and link predict, app/
expected.h) is below `vs_expected` is flagged SLOWER THAN EXPECTED with the
predicted step's largest term; one whose peak memory is off its predicted
memory (memory_vs_expected) by more than `memory_vs_expected` is flagged
MEMORY OFF ITS PREDICTION; each counts as a regression only with
`expected_fails` (the models' own errors are a few to ~20 percent,
docs/projection.md, docs/memory.md).

Each regression is one line: entry, figure, tonight, reference. A changed
environment (rows.FINGERPRINT: git sha, library versions, driver, device,
host, CPU capability cpu_isa, machine_id) or changed options of the entry
are printed under it as the likely cause: for a change point between its
last good and first bad night, for the noise rules between the first bad
night and the night before it, for the other rules against the latest
earlier row. A column an older row lacks is not a change.
"""
import statistics
from dataclasses import dataclass

from ddpbench_py import changepoints
from ddpbench_py import nights as N
from ddpbench_py import rows as R


@dataclass
class Limits:
    k: float = 3.0              # one bad night's bound, median - k x spread (the measured setting, docs/nightly.md)
    floor: float = None         # least spread / median; None: 0.05 with rule "fixed", 0.005 with "changepoint"
    mem_factor: float = 1.05
    acc_tol: float = 0.02
    vs_expected: float = 0.8
    memory_vs_expected: float = 0.25
    expected_fails: bool = False
    rule: str = "changepoint"   # or "fixed": the former throughput rule
    min_history: int = 5        # earlier nights the changepoint rule needs
    confirm: int = 2            # nights in a row the one-bad-night rule needs (tonight included)
    beyond_worst: bool = True   # the one-bad-night rule also needs each of them worse than every earlier
                                # night (False: measured by research/rigs/gate_error_rates.py, not a flag)
    streak: int = 3             # a sustained loss: this many nights in a row beyond streak_k x spread (0: off)
    streak_k: float = 4.0
    alpha: float = 0.01         # a change point's corrected p-value below this
    min_change: float = 0.02    # a change smaller than this fraction is not a regression
    recent: int = 3             # a change point alarms while its first bad night is this recent
    matrix: str = "MATRIX"      # for the bisect command printed under a change

    def __post_init__(self):
        if self.k is None:
            self.k = 3.0
        if self.floor is None:
            self.floor = 0.05 if self.rule == "fixed" else 0.005
        if self.confirm < 1:
            raise ValueError(f"confirm={self.confirm}: must be at least 1")
        if self.streak < 0 or self.streak == 1:
            raise ValueError(f"streak={self.streak}: must be 0 (off) or at least 2")
        if not self.streak_k > 0:
            raise ValueError(f"streak_k={self.streak_k}: must be above 0")


def expected_rule(row, limits):
    """A line when the row ran below vs_expected of its own prediction, else None."""
    ratio = R.num(row, "vs_expected")
    if ratio is None or limits.vs_expected <= 0 or ratio >= limits.vs_expected:
        return None
    return (f"SLOWER THAN EXPECTED {R.experiment(row)}: {R.num(row, 'throughput_img_s'):.1f} img/s is "
            f"{ratio:.2f} of the {row.get('expected_img_s')} img/s its parts and link predict (below "
            f"{limits.vs_expected:g}); the prediction's largest term: {row.get('expected_term') or '-'}")


def memory_expected_rule(row, limits):
    """A line when the row's peak memory is off its own prediction by more than the limit, else None."""
    ratio = R.num(row, "memory_vs_expected")
    if ratio is None or limits.memory_vs_expected <= 0 or abs(ratio - 1) <= limits.memory_vs_expected:
        return None
    return (f"MEMORY OFF ITS PREDICTION {R.experiment(row)}: {R.num(row, 'peak_mem_mb'):.1f} MB is "
            f"{ratio:.2f} of the {row.get('memory_expected_mb')} MB predicted (off by more than "
            f"{limits.memory_vs_expected:g})")


def against_history(row, history, key):
    """(tonight's value, the history's values, their median), or None when a side is missing."""
    values = [v for v in (R.num(r, key) for r in history) if v is not None]
    tonight = R.num(row, key)
    if not values or tonight is None:
        return None
    return tonight, values, statistics.median(values)


def throughput_rule(row, history, limits):
    found = against_history(row, history, "throughput_img_s")
    if not found:
        return None
    tonight, values, median = found
    mad = statistics.median(abs(v - median) for v in values)
    spread = max(1.4826 * mad, limits.floor * median)
    bound = median - limits.k * spread
    if tonight < bound:
        return ("throughput_img_s", f"{tonight:.2f}",
                f"{median:.2f} (median of {len(values)}; bound {bound:.2f} = median - {limits.k:g} x {spread:.2f})")
    return None


def memory_rule(row, history, limits):
    def peak(r):
        return R.num(r, "peak_mem_mb") or R.max_of(r.get("mem_per_device_mb"))
    values = [v for v in map(peak, history) if v]
    tonight = peak(row)
    if not values or tonight is None:
        return None
    ref = statistics.median(values)
    if tonight > limits.mem_factor * ref:
        return ("peak_mem_mb", f"{tonight:.1f}", f"{ref:.1f} (x{limits.mem_factor:g} = {limits.mem_factor * ref:.1f})")
    return None


def parity_rule(row, history, limits):
    if row.get("parity_ok") == "false":
        return ("parity", row.get("parity_max_abs_diff", ""), "parity_ok true (within --verify-tolerance)")
    return None


def accuracy_rule(row, history, limits):
    found = against_history(row, history, "accuracy")
    if not found:
        return None
    tonight, _, ref = found
    if tonight < ref - limits.acc_tol:
        return ("accuracy", f"{tonight:.4f}", f"{ref:.4f} (- {limits.acc_tol:g})")
    return None


RULES = (throughput_rule, memory_rule, parity_rule, accuracy_rule)


def likely_causes(row, history):
    """Environment and option changes since the latest earlier row."""
    last = max(history, key=lambda h: h.get("timestamp", ""))
    causes = R.fingerprint_changes(last, row)
    added, removed = R.options(row) - R.options(last), R.options(last) - R.options(row)
    if added or removed:
        causes.append("options " + " ".join([f"+{o}" for o in sorted(added)] + [f"-{o}" for o in sorted(removed)]))
    return causes


def beyond_noise(key, series, nights, k, beyond_worst, limits):
    """The last `nights` nights (tonight and the ones before it) each worse than the earlier
    nights' median by more than k x their own spread and, with beyond_worst, than every earlier
    night: its line, or None."""
    streak, values = series[-nights:], [n.value for n in series[:-nights]]
    if len(values) < limits.min_history:
        return None
    tonight, median = series[-1].value, statistics.median(values)
    spread = max(1.4826 * statistics.median(abs(v - median) for v in values), limits.floor * median)
    lower = N.FIGURES[key] == "lower"
    bound = median - k * spread if lower else median + k * spread
    worst = (min(values) if lower else max(values)) if beyond_worst else bound
    if all((n.value < min(bound, worst)) if lower else (n.value > max(bound, worst)) for n in streak):
        said = f"tonight {tonight:.2f}" if nights == 1 else \
            f"the last {nights} nights {', '.join(f'{n.value:.2f}' for n in streak)}"
        return (f"{key}: {said}, outside this entry's noise: median {median:.2f} of "
                f"{len(values)} nights, bound {bound:.2f} = median {'-' if lower else '+'} "
                f"{k:g} x {spread:.2f}" + (f", worst night {worst:.2f}" if beyond_worst else ""))
    return None


def spread_rule(key, series, limits):
    """One bad night (with confirm, that many in a row), beyond every earlier night too
    (limits.beyond_worst, the default); else a sustained loss of `streak` nights in a row.
    -> (line, how many of the last nights are bad), or None."""
    found = beyond_noise(key, series, limits.confirm, limits.k, limits.beyond_worst, limits)
    if found:
        return found, limits.confirm
    if limits.streak:
        found = beyond_noise(key, series, limits.streak, limits.streak_k, False, limits)
        if found:
            return found + f" ({limits.streak} nights in a row: a sustained loss)", limits.streak
    return None


def change_lines(experiment, key, series, limits):
    """(regression lines, other lines) of the recent change points of one figure's series."""
    bad, other = [], []
    for c in changepoints.detect([n.value for n in series], alpha=limits.alpha):
        if c.index < len(series) - limits.recent or abs(c.ratio - 1) < limits.min_change:
            continue
        good, first = series[c.index - 1], series[c.index]
        what = (f"{key}: change point {100 * (c.ratio - 1):+.1f}% ({c.before:.2f} -> {c.after:.2f}, confidence "
                f"{100 * c.confidence:.2f}%, p {c.p:.1g}); last good night {good.run_id} (git {good.git_sha}), first bad night "
                f"{first.run_id} (git {first.git_sha})")
        if not N.worse(key, c.ratio):
            other.append(f"improved {experiment} {what}")
            continue
        bad.append(f"REGRESSION {experiment} {what}")
        bad += [f"  changed between them: {x}" for x in likely_causes(first.row, [good.row])]
        if key == "throughput_img_s":  # what bisect_slow.py measures
            bad.append(f"  find the commit: scripts/bisect_slow.py {experiment} {good.git_sha} {first.git_sha} "
                       f"--matrix={limits.matrix} --drop={abs(c.ratio - 1):.3f}")
    return bad, other


def history_lines(row, past, limits):
    """(lines, regressions) of the changepoint rule for one row of tonight."""
    nights = len({h.get("run_id") for h in past})
    if nights < limits.min_history:
        return [f"not enough history {R.experiment(row)}: {nights} earlier night{'s' if nights != 1 else ''} of "
                f"this workload, the change-point and noise rules need {limits.min_history} (--min-history)"], 0
    lines, regressions = [], 0
    for key in N.FIGURES:
        series = N.series(past + [row], key)
        if len(series) <= limits.min_history or series[-1].run_id != row.get("run_id"):
            continue
        bad, other = change_lines(R.experiment(row), key, series, limits)
        one_night = spread_rule(key, series, limits) if key != "peak_mem_mb" else None
        if not bad and one_night:
            line, bad_nights = one_night
            first, before = series[-bad_nights], series[-bad_nights - 1]  # the first bad night, the one before it
            bad = [f"REGRESSION {R.experiment(row)} {line}"]
            bad += [f"  likely cause: {c}" for c in likely_causes(first.row, [before.row])]
        if bad and key in N.ABSOLUTE_SPEED and N.has_reference(row):
            other = [f"machine  {bad[0].split(' ', 1)[1]} (not counted: the reference build ran beside it; "
                     f"throughput_vs_reference is the gated figure)"] + other
            bad = []
        lines += bad + other
        regressions += 1 if bad else 0
    return lines, regressions


def other_workloads(row, history):
    """A line naming earlier rows of this entry measuring another workload (not compared), else None."""
    others = {R.workload(h) for h in history if R.experiment(h) == R.experiment(row)} - {R.workload(row)}
    if not others:
        return None
    mine = R.workload(row)
    diffs = sorted({f"{k}={w[i + 1] or '-'}" for w in others for i, k in enumerate(R.WORKLOAD) if w[i + 1] != mine[i + 1]})
    return (f"note     {R.experiment(row)}: earlier rows of this entry with another workload ({', '.join(diffs)}) "
            f"are not mixed in")


def check(tonight, history, failures, limits):
    """-> (lines to print, number of regressions)."""
    by_key = {}
    for h in history:
        by_key.setdefault(R.workload(h), []).append(h)
    rules = RULES if limits.rule == "fixed" else RULES[1:]
    lines, regressions = [], 0
    for row in N.one_per_workload(tonight):
        for flagged in (expected_rule(row, limits), memory_expected_rule(row, limits), other_workloads(row, history)):
            if flagged:
                lines.append(flagged)
                regressions += 1 if limits.expected_fails and not flagged.startswith("note") else 0
        past = by_key.get(R.workload(row))
        if not past:
            lines.append(f"new      {R.experiment(row)}: no earlier night of this workload")
            continue
        found = [f for f in (rule(row, past, limits) for rule in rules) if f]
        for figure, now, ref in found:
            lines.append(f"REGRESSION {R.experiment(row)} {figure}: tonight {now}, reference {ref}")
        if found:
            regressions += len(found)
            lines += [f"  likely cause: {c}" for c in likely_causes(row, past)]
        if limits.rule != "fixed":
            more, n = history_lines(row, past, limits)
            lines += more
            regressions += n
    for f in failures:
        regressions += 1
        lines.append(f"REGRESSION {f['entry']} run: failed tonight (exit {f['exit_code'] or '-'}): {f['reason']}")
    return lines, regressions
