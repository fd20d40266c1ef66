#!/usr/bin/env python3
"""The source folders are floors, each including only its own and lower ones:

  8 app/         the program: command line, the run, the row, calibration
  7 strategies/  the strategies and their engines
  6 datasets/    the data sources
  5 harness/     runtime services: process groups, memory, phases, traces, snapshots
  4 models/      the ResNet and its fused norm
  3 projection/  the step model and links (torch-free)
  2 planning/    traits, schedule tables, stage splits, ZeRO arithmetic (torch-free)
  1 base/        RunConfig, the log, the results CSV (torch-free)

Each floor is its own library (CMakeLists.txt); floors 1-3 are compiled
without LibTorch's headers, so a torch include there fails the build.

An #include that runs up a floor fails this test (ctest's py.floors_test), so
a strategy cannot come to depend on the program that runs it, nor the
runtime on a strategy."""
import glob
import os
import re
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
FLOORS = {"base": 1, "planning": 2, "projection": 3, "models": 4, "harness": 5, "datasets": 6, "strategies": 7,
          "app": 8}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def upward_includes(root):
    found = []
    for folder, floor in FLOORS.items():
        for path in sorted(glob.glob(os.path.join(root, folder, "**", "*.[ch]*"), recursive=True)):
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
