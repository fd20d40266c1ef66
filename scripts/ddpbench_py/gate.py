"""The regression gate: tonight's rows against earlier nights' rows of the
same matrix entry and workload (rows.workload). A figure regresses when

  throughput  < median - k x spread, spread = max(1.4826 x MAD, floor x median)
              (1.4826 MAD estimates sigma; the floor keeps a history of one
              night, or of identical nights, from flagging every wobble);
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
environment (git sha, library versions, device) or changed options of the
entry are printed beside it as the likely cause.
"""
import statistics
from dataclasses import dataclass

from ddpbench_py import rows as R


@dataclass
class Limits:
    k: float = 3.0
    floor: float = 0.05
    mem_factor: float = 1.05
    acc_tol: float = 0.02
    vs_expected: float = 0.8
    memory_vs_expected: float = 0.25
    expected_fails: bool = False


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
    then, now = R.fingerprint(last), R.fingerprint(row)
    causes = [f"{k} {then[k] or '-'} -> {now[k] or '-'}" for k in R.FINGERPRINT if then[k] != now[k]]
    added, removed = R.options(row) - R.options(last), R.options(last) - R.options(row)
    if added or removed:
        causes.append("options " + " ".join([f"+{o}" for o in sorted(added)] + [f"-{o}" for o in sorted(removed)]))
    return causes


def check(tonight, history, failures, limits):
    """-> (lines to print, number of regressions)."""
    by_key = {}
    for h in history:
        by_key.setdefault(R.workload(h), []).append(h)
    lines, regressions = [], 0
    for row in tonight:
        for flagged in (expected_rule(row, limits), memory_expected_rule(row, limits)):
            if flagged:
                lines.append(flagged)
                regressions += 1 if limits.expected_fails else 0
        past = by_key.get(R.workload(row))
        if not past:
            lines.append(f"new      {R.experiment(row)}: no earlier night of this workload")
            continue
        found = [f for f in (rule(row, past, limits) for rule in RULES) if f]
        for figure, now, ref in found:
            lines.append(f"REGRESSION {R.experiment(row)} {figure}: tonight {now}, reference {ref}")
        if found:
            regressions += len(found)
            lines += [f"  likely cause: {c}" for c in likely_causes(row, past)]
    for f in failures:
        regressions += 1
        lines.append(f"REGRESSION {f['entry']} run: failed tonight (exit {f['exit_code'] or '-'}): {f['reason']}")
    return lines, regressions
