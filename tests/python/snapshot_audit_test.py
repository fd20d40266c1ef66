#!/usr/bin/env python3
"""Tests of scripts/ddpbench_py/snapshot_audit.py on made-up snapshot folders
and logs: an intact snapshot passes; a changed, missing or foreign rank file,
or too few of them, is named; a resume that skipped the newest snapshot is
named as lost."""
import hashlib
import json
import os
import tempfile
import unittest

# PYTHONPATH holds scripts/ (tests/CMakeLists.txt; by hand: docs/testing.md).
from ddpbench_py import snapshot_audit as A  # noqa: E402


def write_snapshot(folder, step, world, files=None):
    """A manifest of `step` by `world` ranks and its rank files; files: (rank, name) to list instead."""
    stem = f"abc-step{step:09d}"
    entries = []
    for rank, name in files or [(r, f"{stem}.rank{r}.pt") for r in range(world)]:
        data = f"rank {rank} of step {step}".encode()
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        entries.append({"rank": rank, "file": name, "bytes": len(data), "sha1": hashlib.sha1(data).hexdigest()})
    manifest = os.path.join(folder, stem + ".json")
    json.dump({"files": entries, "layout": {"world": str(world)}}, open(manifest, "w"))
    return manifest


class Manifests(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def test_intact(self):
        self.assertIsNone(A.manifest_problem(write_snapshot(self.dir, 6, 2)))
        self.assertEqual(A.step_of(write_snapshot(self.dir, 12, 1)), 12)

    def test_changed_file_is_broken(self):
        m = write_snapshot(self.dir, 6, 2)
        with open(os.path.join(self.dir, "abc-step000000006.rank1.pt"), "ab") as f:
            f.write(b"x")
        self.assertEqual(A.manifest_problem(m), "BROKEN (abc-step000000006.rank1.pt)")

    def test_missing_file_is_broken(self):
        m = write_snapshot(self.dir, 6, 2)
        os.remove(os.path.join(self.dir, "abc-step000000006.rank0.pt"))
        self.assertIn("BROKEN (abc-step000000006.rank0.pt missing)", A.manifest_problem(m))

    def test_too_few_files_is_mixed(self):
        m = write_snapshot(self.dir, 6, 2, files=[(0, "abc-step000000006.rank0.pt")])
        self.assertIn("MIXED (1 rank files for 2 ranks", A.manifest_problem(m))

    def test_another_steps_file_is_mixed(self):
        m = write_snapshot(self.dir, 9, 2, files=[(0, "abc-step000000009.rank0.pt"), (1, "abc-step000000006.rank1.pt")])
        self.assertIn("MIXED (abc-step000000006.rank1.pt", A.manifest_problem(m))


LOG_A = """[12:00:01.000] [rank 0] [info] snapshot at step 3: s/abc-step000000003.json
[12:00:02.000] [rank 0] [info] snapshot at step 6: s/abc-step000000006.json
"""
LOG_B = "[12:00:09.500] [rank 0] [info] resuming from s/abc-step{:09d}.json: step {}, 1.0 s trained, ...\n"


class Resumes(unittest.TestCase):
    def test_from_the_newest_is_fine(self):
        self.assertEqual(A.resume_problems([LOG_A, LOG_B.format(6, 6)]), [])

    def test_from_an_older_one_is_lost(self):
        problems = A.resume_problems([LOG_A, LOG_B.format(3, 3)])
        self.assertEqual(problems, ["LOST: resumed from step 3 (abc-step000000003.json) while step 6 was the "
                                    "newest snapshot"])

    def test_one_newer_than_logged_is_fine(self):  # its writer was killed before it logged it
        self.assertEqual(A.resume_problems([LOG_A, LOG_B.format(9, 9)]), [])

    def test_snapshots_after_the_resume_do_not_count(self):
        later = "[12:00:20.000] [rank 0] [info] snapshot at step 9: s/abc-step000000009.json\n"
        self.assertEqual(A.resume_problems([LOG_A + later, LOG_B.format(6, 6)]), [])


if __name__ == "__main__":
    unittest.main()
