"""ddpbench result rows as the reports, figures and the regression gate read
them: loading (refusing files that are not ddpbench's), numbers from cells,
the devices x nodes of a row, the workload a matrix entry measures, and the
environment fingerprint. Standard library only.
"""
import csv
import glob
import os


class RowsError(Exception):
    pass


def load(paths):
    rows = []
    for path in paths:
        try:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                if not reader.fieldnames or "throughput_img_s" not in reader.fieldnames:
                    raise RowsError(f"{path}: not a ddpbench results file (no throughput_img_s column)")
                rows.extend(reader)
        except OSError as e:
            raise RowsError(f"{path}: {e.strerror}")
    return rows


def load_failures(night_csv):
    """The failed entries recorded beside a night's CSV by scripts/nightly.py."""
    path = night_csv[:-4] + ".failures.csv" if night_csv.endswith(".csv") else night_csv + ".failures.csv"
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_history(directory, tonight):
    """The rows of the nights under directory (one CSV per night) made before
    tonight's rows (by timestamp), tonight's own run_id excluded."""
    run_id = tonight[0].get("run_id") if tonight else None
    start = min((r.get("timestamp", "") for r in tonight), default="")
    paths = sorted(p for p in glob.glob(os.path.join(directory, "*.csv")) if not p.endswith(".failures.csv"))
    rows = []
    for path in paths:
        try:
            rows += load([path])
        except RowsError:
            continue  # another tool's CSV in the same directory
    return [r for r in rows if r.get("run_id") and r.get("run_id") != run_id and r.get("timestamp", "") < start]


def num(row, key):
    """The cell as a float, None when empty or absent."""
    try:
        return float(row.get(key) or "")
    except ValueError:
        return None


def max_of(cell):
    """Largest value of a per-device cell "12.5/13.0" (None when empty)."""
    values = [float(x) for x in (cell or "").split("/") if x]
    return max(values) if values else None


def nodes(row):
    return int(row.get("nodes") or 1)


def devices(row):
    """Total devices of the run (the gpus column)."""
    return int(row.get("gpus") or 1)


def devices_by_nodes(row):
    """'2 x 1': devices per node x nodes, as seed 003 writes '2 V100 x 1 node'."""
    n = nodes(row)
    return f"{max(1, devices(row) // n)} x {n}"


def device_kind(row):
    if row.get("device") == "cpu":
        return f"CPU x{row.get('threads_per_device') or '?'} thr"
    return row.get("device_name") or row.get("device", "")


def experiment(row):
    """The matrix entry's name, or strategy and its options for rows made by hand."""
    if row.get("entry"):
        return row["entry"]
    extra = [row.get("schedule")] if row.get("strategy") == "pmp" and row.get("schedule") else []
    return "-".join([row.get("strategy", "?"), *extra])


# What one matrix entry measures: tonight's row is compared with earlier rows
# that agree on all of these. Options outside (threads, buckets, launch) are
# not part of the workload; a change there is reported as a likely cause.
WORKLOAD = ("strategy", "gpus", "nodes", "device", "model", "width", "norm", "small_input", "dataset",
            "image_size", "per_device_batch", "amp", "optimizer", "chunks", "schedule", "grad_accum")


def workload(row):
    return (experiment(row),) + tuple(row.get(k, "") for k in WORKLOAD)


FINGERPRINT = ("git_sha", "torch_version", "cuda_version", "nccl_version", "driver_version", "device_name", "host")


def fingerprint(row):
    return {k: row.get(k, "") for k in FINGERPRINT}


def options(row):
    """The row's command-line flags but the per-night ones (--out, --run-id...)."""
    skip = ("--out=", "--run-id=", "--baseline=", "--entry=", "--progress=")
    words = (row.get("command") or "").split()[1:]
    return {w for w in words if not w.startswith(skip)}
