"""ddpbench result rows as the reports, figures and the regression gate read
them: loading (refusing files that are not ddpbench's), numbers from cells,
the devices x nodes of a row, the workload a matrix entry measures, and the
environment fingerprint. Standard library only.
"""
import csv
import glob
import os
import statistics


class RowsError(Exception):
    pass


# The columns scripts/ddpbench_py/entries.py writes to a night's failures file.
FAILURE_COLUMNS = ["run_id", "entry", "strategy", "gpus", "nodes", "exit_code", "reason", "command"]


def read_table(path, columns, kind):
    """The rows of a CSV file ddpbench wrote as a `kind` table (every one of
    `columns` in its header); a RowsError names a file that is not one."""
    header, body = read_csv(path)
    missing = [c for c in columns if c not in header]
    if missing:
        raise RowsError(f"{path}: not a ddpbench {kind} file (no {', '.join(missing)} column)")
    return body


def read_csv(path):
    """(header, rows) of a CSV file; a file that is not UTF-8 text or not CSV
    (a NUL byte, a runaway quote) is a RowsError naming it."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            body = []
            for row in reader:
                if None in row or None in row.values():  # DictReader's marks of a short or long line
                    raise RowsError(f"{path}:{reader.line_num}: the cells of this line do not match the "
                                    f"header's {len(reader.fieldnames)} columns")
                body.append(row)
            return reader.fieldnames or [], body
    except OSError as e:
        raise RowsError(f"{path}: {e.strerror}")
    except UnicodeDecodeError as e:
        raise RowsError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})")
    except csv.Error as e:
        raise RowsError(f"{path}: not a readable CSV file ({e})")


# Cells the reports take apart as numbers: whole numbers >= 1, numbers, and
# per-device lists of numbers ("12.5/13.0"). Empty cells are allowed.
COUNT_COLUMNS = ("gpus", "nodes")
NUMBER_COLUMNS = ("lr", "time_budget_s")
PER_DEVICE_COLUMNS = ("mem_per_device_mb",)


def check_cells(path, line, row):
    """A RowsError naming the file, line, column and value of the first cell
    the reports could not read."""
    def bad(key, accepted):
        return RowsError(f"{path}:{line}: {key}={row[key]!r}: not {accepted}")
    for key in COUNT_COLUMNS:
        if row.get(key) and not (row[key].isdigit() and int(row[key]) >= 1):
            raise bad(key, "a whole number >= 1")
    for key in NUMBER_COLUMNS + PER_DEVICE_COLUMNS:
        try:
            [float(x) for x in (row.get(key) or "").split("/") if x]
        except ValueError:
            raise bad(key, "a number" if key in NUMBER_COLUMNS else "numbers joined by /")
        if key in NUMBER_COLUMNS and "/" in (row.get(key) or ""):
            raise bad(key, "a number")


def load(paths):
    rows = []
    for path in paths:
        header, body = read_csv(path)
        if "throughput_img_s" not in header:
            raise RowsError(f"{path}: not a ddpbench results file (no throughput_img_s column)")
        for i, row in enumerate(body):
            check_cells(path, i + 2, row)
        rows.extend(attach_reference(path, body))
    return rows


def load_failures(night_csv):
    """The failed entries recorded beside a night's CSV by scripts/nightly.py."""
    path = night_csv[:-4] + ".failures.csv" if night_csv.endswith(".csv") else night_csv + ".failures.csv"
    if not os.path.exists(path):
        return []
    header, body = read_csv(path)
    missing = [c for c in FAILURE_COLUMNS if c not in header]
    if missing:
        raise RowsError(f"{path}: not a nightly failures file (no {', '.join(missing)} column); "
                        f"its columns are {', '.join(FAILURE_COLUMNS)}")
    return body


def night_rows(path, skipped):
    """The readable rows of one earlier night's CSV; each row that is not
    (cells that do not match the header, a cell the reports cannot read, a
    throughput that is not a number) is left out and named as 'FILE:LINE:
    why' in `skipped`. A file that is not a ddpbench results file gives []."""
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if "throughput_img_s" not in (reader.fieldnames or []):
                return []  # another tool's CSV in the same directory
            rows = []
            for row in reader:
                why = row_problem(path, reader, row)
                if why:
                    skipped.append(why)
                else:
                    rows.append(row)
            return rows
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        skipped.append(f"{path}: not read ({e})")
        return []


def row_problem(path, reader, row):
    """Why a row of a night cannot be used ('' when it can)."""
    where = f"{path}:{reader.line_num}"
    if None in row or None in row.values():
        return f"{where}: the cells of this line do not match the header's {len(reader.fieldnames)} columns"
    try:
        check_cells(path, reader.line_num, row)
    except RowsError as e:
        return str(e)
    if row.get("throughput_img_s") and num(row, "throughput_img_s") is None:
        return f"{where}: throughput_img_s={row['throughput_img_s']!r}: not a number"
    return ""


def reference_path(night_csv):
    """Where scripts/nightly.py --reference-bin keeps a night's reference rows."""
    return (night_csv[:-4] if night_csv.endswith(".csv") else night_csv) + ".reference.csv"


def attach_reference(night_csv, rows):
    """Sets each row's reference_throughput_img_s: the median throughput of the
    reference build's launches of the same entry that night (interleaved with
    the night's own launches), when the night has them. Returns rows."""
    path = reference_path(night_csv)
    if not os.path.exists(path):
        return rows
    by_entry = {}
    for ref in night_rows(path, []):
        if num(ref, "throughput_img_s") is not None:
            by_entry.setdefault(ref.get("entry", ""), []).append(num(ref, "throughput_img_s"))
    for row in rows:
        values = by_entry.get(row.get("entry", ""))
        if values:
            row["reference_throughput_img_s"] = repr(statistics.median(values))
    return rows


def load_history(directory, tonight, skipped=None):
    """The rows of the nights under directory (one CSV per night) made before
    tonight's rows (by timestamp), tonight's own run_id excluded; rows that
    cannot be read are named in `skipped` (a list) and left out."""
    run_id = tonight[0].get("run_id") if tonight else None
    start = min((r.get("timestamp", "") for r in tonight), default="")
    paths = sorted(p for p in glob.glob(os.path.join(directory, "*.csv"))
                   if not p.endswith(".failures.csv") and not p.endswith(".reference.csv"))
    rows, skipped = [], [] if skipped is None else skipped
    for path in paths:
        rows += attach_reference(path, night_rows(path, skipped))
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


# The environment a row ran in; a change between two nights is printed as the
# likely cause of a regression. cpu_isa is ATen's CPU capability (avx2,
# avx512, default: which kernels ran); machine_id a short hash of the machine,
# which differs between two VMs of the same host name.
FINGERPRINT = ("git_sha", "torch_version", "cuda_version", "nccl_version", "driver_version", "device_name", "host",
               "cpu_isa", "machine_id")


def fingerprint(row):
    """{column: cell} of the row's environment; a column the row lacks (a row
    of an older ddpbench, before that column existed) is None, not ''."""
    return {k: row.get(k) for k in FINGERPRINT}


def fingerprint_changes(then, now):
    """'column before -> after' for each FINGERPRINT column that differs
    between two rows. A column one of them lacks altogether (written by an
    older ddpbench) is unknown there, not a change; an empty cell ('-') is a value."""
    a, b = fingerprint(then), fingerprint(now)
    return [f"{k} {a[k] or '-'} -> {b[k] or '-'}" for k in FINGERPRINT
            if a[k] is not None and b[k] is not None and a[k] != b[k]]


def options(row):
    """The row's command-line flags but the per-night ones (--out, --run-id...)."""
    skip = ("--out=", "--run-id=", "--baseline=", "--entry=", "--progress=")
    words = (row.get("command") or "").split()[1:]
    return {w for w in words if not w.startswith(skip)}
