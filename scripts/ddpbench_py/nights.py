"""A figure of one workload over the nights, oldest first, as the gate's
change-point and noise rules read it: one value per night (the median of the
night's rows of that workload, so a night run with several rows or
--repeat counts once), with the night's run id, git revision and a row for
its environment. Standard library only.
"""
import statistics
from dataclasses import dataclass

from ddpbench_py import rows as R

# The figures watched over the nights, and which way is worse.
# throughput_vs_reference: the night's throughput over the reference build's,
# launched interleaved with it (scripts/nightly.py --reference-bin); only
# nights run with a reference have it.
FIGURES = {"throughput_img_s": "lower", "step_ms_p50": "higher", "peak_mem_mb": "higher",
           "throughput_vs_reference": "lower"}
# The figures a reference run makes the machine's own drift in, so not gated
# on their own where the ratio is (an environment change moves both builds alike).
ABSOLUTE_SPEED = ("throughput_img_s", "step_ms_p50")


@dataclass
class Night:
    run_id: str
    value: float
    row: dict

    @property
    def git_sha(self):
        return self.row.get("git_sha") or "-"


def value(row, key):
    if key == "throughput_vs_reference":
        mine, ref = R.num(row, "throughput_img_s"), R.num(row, "reference_throughput_img_s")
        return mine / ref if mine is not None and ref else None
    if key == "peak_mem_mb":
        return R.num(row, key) or R.max_of(row.get("mem_per_device_mb"))
    return R.num(row, key)


def series(rows, key):
    """[Night] of the rows' key, one per run_id, in the order of their first timestamp."""
    by_night = {}
    for row in rows:
        by_night.setdefault(row.get("run_id", ""), []).append(row)
    nights = []
    for run_id, group in sorted(by_night.items(), key=lambda kv: min(r.get("timestamp", "") for r in kv[1])):
        values = [v for v in (value(r, key) for r in group) if v is not None]
        if values:
            nights.append(Night(run_id, statistics.median(values), group[0]))
    return nights


def has_reference(row):
    return R.num(row, "reference_throughput_img_s") is not None


def one_per_workload(rows):
    """A night's rows with the launches of each workload (an entry run as
    several processes) folded into one: the launch of median throughput,
    marked parity_ok false with the worst difference if any launch failed
    parity, so that no launch's failure is hidden by the fold."""
    groups = {}
    for row in rows:
        groups.setdefault(R.workload(row), []).append(row)
    out = []
    for group in groups.values():
        ranked = sorted(group, key=lambda r: R.num(r, "throughput_img_s") or 0.0)
        row = dict(ranked[(len(ranked) - 1) // 2])
        failed = [r for r in group if r.get("parity_ok") == "false"]
        if failed and row.get("parity_ok") != "false":
            worst = max(failed, key=lambda r: R.num(r, "parity_max_abs_diff") or 0.0)
            row["parity_ok"], row["parity_max_abs_diff"] = "false", worst.get("parity_max_abs_diff", "")
        out.append(row)
    return out


def worse(key, ratio):
    """Whether after/before = ratio is a move the wrong way for this figure."""
    return ratio < 1 if FIGURES[key] == "lower" else ratio > 1
