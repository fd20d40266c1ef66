"""Shared by the benchmark drivers (research/rigs/bench_*.py and the torch scripts
they compare with): the machine line every result file carries, a free port
for spawned ranks to meet on, and interleaved rounds (each round runs every entry once,
the order reversed every other round, so a slow minute on a shared machine
hits every entry alike)."""
import os
import platform
import socket


def machine():
    """Host, cores and CPU model, for the result files."""
    cpu = platform.processor() or "cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{socket.gethostname()}, {os.cpu_count()} cores, {cpu}"


def free_port():
    """A TCP port free on loopback now, for ranks spawned on this machine to meet on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def interleaved(entries, rounds, run):
    """run(entry) for every entry in every round; returns [(round, entry, result)]."""
    out = []
    for r in range(rounds):
        for entry in (entries if r % 2 == 0 else list(reversed(entries))):
            out.append((r, entry, run(entry)))
    return out


def write_results(out, runs, stamp, lines):
    """Appends every run (a dict each) to the CSV `out` with the timestamp and
    machine, and writes the table `lines` to the .md beside it."""
    import csv
    fields = ["timestamp", "machine", *runs[0].keys()]
    old_fields, old_rows = None, []
    if os.path.exists(out):
        with open(out, newline="") as f:
            reader = csv.DictReader(f)
            old_fields, old_rows = reader.fieldnames, list(reader)
    if old_fields is not None and old_fields != fields:
        # A column added (or gone) since the file began: rewritten with every
        # column of both, the old rows' new cells empty, so no row shifts.
        fields = old_fields + [k for k in fields if k not in old_fields]
        with open(out + ".tmp", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(old_rows)
        os.replace(out + ".tmp", out)
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, restval="")
        if old_fields is None:
            w.writeheader()
        for x in runs:
            w.writerow({"timestamp": stamp, "machine": machine(), **x})
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
