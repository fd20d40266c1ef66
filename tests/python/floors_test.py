#!/usr/bin/env python3
"""The source folders are floors, each including only its own and lower ones:

  6 app/         the program: command line, the run, the row, calibration
  5 projection/  the step model and links (torch-free)
  4 strategies/  the strategies and their traits
  3 datasets/    the data sources
  2 harness/     runtime services: RunConfig, logging, process groups, memory, traces
  1 models/      the ResNet and its fused norm

An #include that runs up a floor fails this test (ctest's py.floors_test), so
a strategy cannot come to depend on the program that runs it, nor the
runtime on a strategy."""
import glob
import os
import re
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FLOORS = {"models": 1, "harness": 2, "datasets": 3, "strategies": 4, "projection": 5, "app": 6}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def upward_includes(root):
    found = []
    for folder, floor in FLOORS.items():
        for path in sorted(glob.glob(os.path.join(root, folder, "*.[ch]*"))):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                if FLOORS.get(target, 0) > floor:
                    line = text.count("\n", 0, m.start()) + 1
                    found.append(f"{folder}/{os.path.basename(path)}:{line} includes {m.group(0).strip()} "
                                 f"(floor {FLOORS[target]} above {floor})")
    return found


class Floors(unittest.TestCase):
    def test_no_include_runs_up_a_floor(self):
        self.assertEqual(upward_includes(ROOT), [])

    def test_every_source_folder_has_a_floor(self):
        folders = {os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "*", "*.cpp"))}
        folders = {f for f in folders if f != "tests" and not f.startswith("build")}
        self.assertEqual(folders - set(FLOORS), set())


if __name__ == "__main__":
    unittest.main()
