#!/usr/bin/env python3
"""Fuzz suite of the Python readers of outside data: the nightly
job's TOML matrix (scripts/nightly.py load_matrix) and scripts/report.py's
inputs (a results CSV and its failures CSV, read by scripts/ddpbench_py/rows.py, then
every table, the markdown, the HTML page and the gate built from them).
Seeded mutations of the corpus in tests/fuzz/corpus/ (bit flips, truncation,
growth, fields set to 0, huge, negative, NaN or empty, lines repeated or
dropped), thousands per reader: each input must end in success or one clear
error (MatrixError, RowsError or an exit with a message), never another
exception. tests/fuzz_test.cpp does the same for the C++ readers."""
import csv
import io
import os
import random
import re
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
from ddpbench_py import gate  # noqa: E402
import nightly  # noqa: E402
import report  # noqa: E402
from ddpbench_py import report_html  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402

CORPUS = os.path.join(HERE, "..", "fuzz", "corpus")
INPUTS_PER_READER = 2000
FIELD_VALUES = [b"0", b"-1", b"4294967295", b"-9223372036854775809", b"1e308", b"-1e308", b"nan", b"inf",
                b"", b"\"", b"[", b"]", b"=", b",", b"\x00", b"\xff\xfe", b"true", b"'x'", b"{}", b"\n"]
FIELD = re.compile(rb"[A-Za-z0-9_.:+\-]+")


def mutate(seed, rng):
    """One mutation of `seed` (bytes), chosen by `rng`."""
    s = bytearray(seed)
    kind = rng.randrange(6)
    if kind == 0 and s:  # bit flips
        for _ in range(rng.randint(1, 8)):
            s[rng.randrange(len(s))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation
        del s[rng.randrange(len(s) + 1):]
    elif kind == 2:  # growth: a copied chunk or random bytes
        at = rng.randrange(len(s) + 1)
        start = rng.randrange(len(s) + 1)
        chunk = s[start:start + rng.randint(1, 64)] if rng.random() < 0.5 else bytes(rng.randrange(256) for _ in range(8))
        s[at:at] = chunk
    elif kind == 3:  # lines repeated, dropped or swapped
        lines = bytes(s).split(b"\n")
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        op = rng.randrange(3)
        if op == 0:
            lines.insert(j, lines[i])
        elif op == 1:
            del lines[i]
        else:
            lines[i], lines[j] = lines[j], lines[i]
        s = bytearray(b"\n".join(lines))
    else:  # a field (number, name, cell) set to 0, huge, negative, NaN, empty or punctuation
        fields = list(FIELD.finditer(bytes(s)))
        if fields:
            m = rng.choice(fields)
            s[m.start():m.end()] = rng.choice(FIELD_VALUES)
    return bytes(s)


def read_matrix(path):
    nightly.load_matrix(path)


def read_report(path):
    """What scripts/report.py and the gate do with a results file, in process."""
    rows = R.load([path])
    if not rows:
        return  # report.py: "no rows in ...", exit 1
    failures = R.load_failures(path)
    tables = report.sections(rows, failures)
    report.markdown(rows, failures, tables=tables)
    report_html.page("fuzz", report.environment(rows), tables, [])
    report.strategy_table(rows)
    gate.check(rows, rows, failures, gate.Limits())


def read_failures(path):
    """A night's failures CSV beside a valid results file."""
    night = path[:-len(".failures.csv")] + ".csv"
    rows = R.load([night])
    failures = R.load_failures(night)
    report.markdown(rows, failures)
    gate.check(rows, rows, failures, gate.Limits())


CLEAR = (nightly.MatrixError, R.RowsError)


def fuzz(test, seed, path, read, rng_seed):
    """-> (read, clear errors); any other exception fails `test`, naming the input kept on disk."""
    rng = random.Random(rng_seed)
    tally = [0, 0]
    for i in range(INPUTS_PER_READER):
        data = mutate(seed, rng)
        with open(path, "wb") as f:
            f.write(data)
        try:
            read(path)
            tally[0] += 1
        except CLEAR as e:
            test.assertTrue(str(e), f"input {i}: an error without a message")
            tally[1] += 1
        except Exception as e:  # noqa: BLE001 - the point of the test
            kept = path + f".crash{i}"
            with open(kept, "wb") as f:
                f.write(data)
            test.fail(f"input {i} of {os.path.basename(path)} (kept as {kept}): {type(e).__name__}: {e}")
    return tally


class FuzzReaders(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fuzz-py-")

    def seed(self, name):
        with open(os.path.join(CORPUS, name), "rb") as f:
            return f.read()

    def report_tally(self, name, tally):
        print(f"{name}: {INPUTS_PER_READER} mutated inputs: {tally[0]} read, {tally[1]} clear errors",
              file=sys.stderr)
        self.assertEqual(sum(tally), INPUTS_PER_READER)

    def test_matrix_toml(self):
        tally = fuzz(self, self.seed("matrix.toml"), os.path.join(self.tmp, "m.toml"), read_matrix, 2511)
        self.report_tally("nightly matrix (TOML)", tally)
        self.assertGreater(tally[0], 0, "no mutation was accepted: the seed itself may be broken")
        self.assertGreater(tally[1], 0)

    def test_results_csv_through_the_report(self):
        for name, rng_seed in (("results.csv", 2512), ("report_rows.csv", 2513)):
            tally = fuzz(self, self.seed(name), os.path.join(self.tmp, "night.csv"), read_report, rng_seed)
            self.report_tally(f"report.py results CSV ({name})", tally)
            self.assertGreater(tally[0], 0)

    def test_failures_csv(self):
        with open(os.path.join(self.tmp, "night.csv"), "wb") as f:
            f.write(self.seed("report_rows.csv"))
        tally = fuzz(self, self.seed("failures.csv"), os.path.join(self.tmp, "night.failures.csv"),
                     read_failures, 2514)
        self.report_tally("report.py failures CSV", tally)
        self.assertGreater(tally[0], 0)

    def test_mutations_are_varied(self):
        rng = random.Random(1)
        seed = self.seed("matrix.toml")
        outs = {mutate(seed, rng) for _ in range(200)}
        self.assertGreater(len(outs), 150)
        self.assertTrue(any(len(o) < len(seed) for o in outs) and any(len(o) > len(seed) for o in outs))


if __name__ == "__main__":
    unittest.main()
