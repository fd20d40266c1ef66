"""The Python shared by ddpbench's user commands (scripts/*.py):

  rows         result rows: loading, cells, workloads, environment
  entries      running matrix entries and recording failures (nightly, compare)
  gate         the nightly regression gate
  report_html  one self-contained HTML page of a report
  figures      throughput, memory, scaling and history figures (matplotlib)
  snapshot_audit  whether a run's snapshots survived its faults (none broken, mixed or lost)
  elastic_drill   torchrun elastic on one machine: an agent killed, another joining

No sys.path edits: a command run as `python3 scripts/X.py` has scripts/ on its
path, so `from ddpbench_py import rows` resolves; tests get scripts/ through
PYTHONPATH (tests/CMakeLists.txt).
"""
