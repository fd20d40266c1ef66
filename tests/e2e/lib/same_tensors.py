#!/usr/bin/env python3
"""Exits 0 when snapshot rank files hold the same tensors, bit for bit (model
and optimizer state both present); else prints each pair that differs and
what differs in it, and exits 1.

  same_tensors.py A.pt B.pt [--ignore=KEY ...]          one pair
  same_tensors.py --pairs=FILE [--ignore=KEY ...]        every line of FILE: LABEL<TAB>A.pt<TAB>B.pt

KEY: an entry left out, e.g. a layout. Importing torch costs seconds of CPU,
so a test that compares many pairs lists them in one file and pays it once.
"""
import sys

import torch
import torch.jit._pickle

torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])  # C++ pickle_save's dict tag


def differences(path_a, path_b, ignore):
    """What differs between two rank files, empty when they are the same."""
    a, b = (torch.load(p, weights_only=True) for p in (path_a, path_b))
    for k in ignore:
        a.pop(k, None), b.pop(k, None)
    if a.keys() != b.keys():
        return f"entries in one only: {sorted(set(a) ^ set(b))[:8]}"
    if not (any(k.startswith("model.") for k in a) and any(k.startswith("optim.") for k in a)):
        return f"no model or no optimizer state: {sorted(a)[:8]}"
    bad = [k for k in a if not torch.equal(a[k], b[k])]
    return f"tensors differ: {bad[:5]}" if bad else ""


def main(argv):
    ignore = [x.split("=", 1)[1] for x in argv if x.startswith("--ignore=")]
    lists = [x.split("=", 1)[1] for x in argv if x.startswith("--pairs=")]
    files = [x for x in argv if not x.startswith("--")]
    pairs = [tuple(line.rstrip("\n").split("\t")) for f in lists for line in open(f) if line.strip()]
    if len(files) == 2:
        pairs.append((f"{files[0]} and {files[1]}", files[0], files[1]))
    if not pairs or len(files) not in (0, 2) or any(len(p) != 3 for p in pairs):
        print(__doc__, file=sys.stderr)
        return 2
    failed = 0
    for label, a, b in pairs:
        why = differences(a, b, ignore)
        if why:
            print(f"{label}: {why}")
            failed += 1
    print(f"same_tensors: {len(pairs) - failed}/{len(pairs)} pairs bit-identical")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
