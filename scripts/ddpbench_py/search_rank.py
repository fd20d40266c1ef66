"""How good was the performance model's ranking? scripts/search.py measures
the configurations `ddpbench --search` ranks first; this joins the ranked
table with the measured rows by entry and scores the ranking: Kendall's tau-b
between predicted and measured throughput over the measured set, and the
regret of running the model's first pick instead of the measured best.
Kept apart from the driver so that the arithmetic is tested without running
anything. Standard library only.
"""
import math
import statistics

from ddpbench_py import rows as R

# ddpbench --search-csv's columns, in its order.
RANKED_COLUMNS = ["rank", "entry", "strategy", "flags", "batch_per_device", "global_batch", "predicted_img_s",
                  "predicted_step_ms", "predicted_memory_mb", "fits", "validated", "error_pct", "largest_term",
                  "note"]
# The columns summarize() adds to each ranked row.
MEASURED_COLUMNS = ["measured_img_s", "measured_peak_mem_mb", "measured_runs", "failed_runs", "model_error_pct"]


class SearchError(Exception):
    pass


def load_ranked(path):
    """The rows of a ddpbench --search-csv file; a SearchError names a file that is not one."""
    try:
        body = R.read_table(path, RANKED_COLUMNS, "search")
    except R.RowsError as e:
        raise SearchError(str(e))
    for i, row in enumerate(body):
        if not row["entry"] or " " in row["entry"] or row["fits"] not in ("0", "1"):
            raise SearchError(f"{path}:{i + 2}: entry={row['entry']!r} fits={row['fits']!r}: not an entry "
                              f"label without spaces and a fits of 0 or 1")
    return body


def _sign(x):
    """-1, 0 or 1."""
    return (x > 0) - (x < 0)


def kendall_tau(predicted, measured):
    """Kendall's tau-b of two equal-length lists; None under 2 items or when one list is constant."""
    if len(predicted) != len(measured):
        raise ValueError(f"kendall_tau: {len(predicted)} predicted against {len(measured)} measured")
    pairs = [(i, j) for i in range(len(predicted)) for j in range(i + 1, len(predicted))]
    s = [_sign(predicted[i] - predicted[j]) * _sign(measured[i] - measured[j]) for i, j in pairs]
    untied_p = sum(1 for i, j in pairs if predicted[i] != predicted[j])
    untied_m = sum(1 for i, j in pairs if measured[i] != measured[j])
    if not untied_p or not untied_m:
        return None
    return sum(s) / math.sqrt(untied_p * untied_m)


def regret(measured_by_entry, model_first):
    """(best measured - the model's first pick's) / best measured; None when the pick is unmeasured."""
    best = max(measured_by_entry.values(), default=None)
    if model_first not in measured_by_entry or not best or best <= 0:
        return None
    return max(0.0, (best - measured_by_entry[model_first]) / best)


def ranked_order(ranked_rows):
    """The fitting, ranked rows in the model's order (rank 1 first)."""
    ranked = [r for r in ranked_rows if r.get("fits") == "1" and (r.get("rank") or "").isdigit()]
    return sorted(ranked, key=lambda r: int(r["rank"]))


def _median(values):
    """The median of the numbers, None when there are none."""
    return statistics.median(values) if values else None


def _join(ranked_row, runs, failed):
    """One ranked row with its measured medians and the model's error."""
    img_s = _median([v for v in (R.num(r, "throughput_img_s") for r in runs) if v is not None])
    mem = _median([v for v in (R.num(r, "peak_mem_mb") for r in runs) if v is not None])
    predicted = R.num(ranked_row, "predicted_img_s")
    error = 100.0 * (predicted / img_s - 1) if img_s and predicted is not None else None
    return {**ranked_row, "measured_img_s": img_s, "measured_peak_mem_mb": mem, "measured_runs": len(runs),
            "failed_runs": failed, "model_error_pct": error}


def summarize(ranked_rows, measured_rows, failures=()):
    """Joins ranked and measured rows by entry -> {rows, tau, n, regret, best, first}."""
    runs, failed = {}, {}
    for r in measured_rows:
        runs.setdefault(r.get("entry"), []).append(r)
    for f in failures:
        failed[f.get("entry")] = failed.get(f.get("entry"), 0) + 1
    joined = [_join(r, runs.get(r["entry"], []), failed.get(r["entry"], 0)) for r in ranked_rows]
    measured = [r for r in joined if r["measured_img_s"] is not None and R.num(r, "predicted_img_s") is not None]
    by_entry = {r["entry"]: r["measured_img_s"] for r in measured}
    order = ranked_order(ranked_rows)
    first = order[0]["entry"] if order else None
    best = max(measured, key=lambda r: r["measured_img_s"])["entry"] if measured else None
    tau = kendall_tau([R.num(r, "predicted_img_s") for r in measured], [r["measured_img_s"] for r in measured])
    return {"rows": joined, "tau": tau, "n": len(measured), "regret": regret(by_entry, first), "best": best,
            "first": first}
