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
FIGURES = {"throughput_img_s": "lower", "step_ms_p50": "higher", "peak_mem_mb": "higher"}


@dataclass
class Night:
    run_id: str
    value: float
    row: dict

    @property
    def git_sha(self):
        return self.row.get("git_sha") or "-"


def value(row, key):
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


def worse(key, ratio):
    """Whether after/before = ratio is a move the wrong way for this figure."""
    return ratio < 1 if FIGURES[key] == "lower" else ratio > 1
