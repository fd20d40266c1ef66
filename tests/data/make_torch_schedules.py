#!/usr/bin/env python3
"""Writes tests/data/torch_schedules.txt: the order of actions on every rank
that PyTorch's own schedule classes (torch.distributed.pipelining, the
installed torch) produce for looped BFS, ZB-V and DualPipeV at several
shapes. tests/model_parallel_test.cpp checks pmp's tables against it (issue
27); tests/python/torch_schedules_test.py checks that the file is still what
the installed torch produces. Each schedule's rank order is computed without
processes: the classes' per-rank planning method is called on a stand-in
object carrying the shape.
  tests/data/make_torch_schedules.py [OUT]
Line format: SCHEDULE S V M RANK: ACTION ... with ACTION = OP MICROBATCH c CHUNK,
OP one of F (forward), b (whole backward), B (input gradient), W (weight gradient)."""
import os
import sys
import types

from torch.distributed.pipelining import schedules as S

HERE = os.path.dirname(os.path.abspath(__file__))
OP = {"FORWARD": "F", "FULL_BACKWARD": "b", "BACKWARD_INPUT": "B", "BACKWARD_WEIGHT": "W"}
SHAPES = ([("looped-bfs", S.ScheduleLoopedBFS, s, v, m) for s in (2, 3) for v in (2, 3) for m in (1, 2, 3, 5)] +
          [("zbv", S.ScheduleZBVZeroBubble, s, 2, m) for s in (2, 3, 4) for m in range(1, 11)] +
          [("dualpipev", S.ScheduleDualPipeV, s, 2, m) for s in (2, 3, 4) for m in range(2 * s, 2 * s + 5)])


def rank_rows(cls, ranks, chunks, micro):
    shape = types.SimpleNamespace(pp_group_size=ranks, _n_microbatches=micro, num_stages=ranks * chunks,
                                  _num_stages=ranks * chunks, _stages=[None] * chunks, n_local_stages=chunks)
    rows = []
    for rank in range(ranks):
        shape.rank = rank
        row = []
        for action in cls._calculate_single_rank_operations(shape, rank):
            if action is None:
                continue
            for a in getattr(action, "sub_actions", None) or (action,):
                row.append(f"{OP[a.computation_type.name]}{a.microbatch_index}c{a.stage_index}")
        rows.append(row)
    return rows


def lines():
    out = []
    for name, cls, s, v, m in SHAPES:
        for rank, row in enumerate(rank_rows(cls, s, v, m)):
            out.append(f"{name} {s} {v} {m} {rank}: {' '.join(row)}")
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "torch_schedules.txt")
    with open(path, "w") as f:
        f.write("# made by tests/data/make_torch_schedules.py from torch.distributed.pipelining (torch "
                f"{__import__('torch').__version__})\n")
        f.write("\n".join(lines()) + "\n")


if __name__ == "__main__":
    main()
