#!/usr/bin/env python3
"""scripts/nvtx_trace.py and plots/gantt.py on a real 2-stage pipeline run
(CPU, tiny model): the trace is valid JSON with one track for the main thread
and one per stage, every stage runs forward and backward once per micro-batch
and step, events on a track are ordered and nested (never partly
overlapping), and the Gantt chart is a PNG.

    nvtx_trace_test.py BINARY INJECTION_LIBRARY SOURCE_DIR
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile


def _check_trace():
    """tests/e2e/lib/check_trace.py (the --trace test's checks), loaded from its file."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "lib", "check_trace.py")
    spec = importlib.util.spec_from_file_location("check_trace", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_nesting = _check_trace().check_nesting

CHUNKS, STEPS = 4, 3  # timed steps; one warm-up step before them


def check_track(events, where):
    """Ordered by start (nvtx_trace.py writes them in pop order), then nested."""
    check_nesting(sorted(events, key=lambda e: (e["ts"], -e["dur"])), where)


def main():
    binary, library, src = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        trace, png = os.path.join(tmp, "t.json"), os.path.join(tmp, "g.png")
        subprocess.run([sys.executable, os.path.join(src, "scripts", "nvtx_trace.py"), f"--library={library}", trace,
                        "--", binary, "--strategy=pmp", "--gpus=2", "--oversubscribe", "--device=cpu",
                        "--small-input", "--width=4", "--image-size=16", "--batch-size=8", f"--chunks={CHUNKS}",
                        f"--steps={STEPS}", "--warmup=1", "--progress=off"], check=True, stderr=subprocess.DEVNULL)
        events = json.load(open(trace))["traceEvents"]
        spans = [e for e in events if e["ph"] == "X"]
        tracks = sorted({(e["pid"], e["tid"]) for e in spans})
        assert tracks == [(0, 0), (0, 1), (0, 2)], f"want main + 2 stage tracks of one rank, got {tracks}"
        for track in tracks:
            check_track([e for e in spans if (e["pid"], e["tid"]) == track], f"track {track}")
        for tid in (1, 2):
            count = {n: sum(1 for e in spans if e["tid"] == tid and e["name"] == n) for n in ("forward", "backward")}
            assert count == {"forward": CHUNKS * (STEPS + 1), "backward": CHUNKS * (STEPS + 1)}, (tid, count)
        assert sum(e["name"] == "step" for e in spans) == STEPS + 1
        python = os.path.join(src, ".venv", "bin", "python")
        if os.path.exists(python):
            subprocess.run([python, os.path.join(src, "plots", "gantt.py"), trace, "--out", png], check=True,
                           stdout=subprocess.DEVNULL)
            assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "gantt.py wrote no PNG"
    print("nvtx_trace_test: all checks passed")


if __name__ == "__main__":
    main()
