#!/usr/bin/env python3
"""Exits 0 when two snapshot rank files hold the same tensors, bit for bit
(model and optimizer state both present); else prints what differs, exits 1.
  same_tensors.py A.pt B.pt [--ignore=KEY ...]   (KEY: an entry left out, e.g. a layout)
"""
import sys

import torch
import torch.jit._pickle

torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])  # C++ pickle_save's dict tag
a, b = (torch.load(p, weights_only=True) for p in sys.argv[1:3])
for k in [x.split("=", 1)[1] for x in sys.argv[3:] if x.startswith("--ignore=")]:
    a.pop(k, None), b.pop(k, None)
assert a.keys() == b.keys(), sorted(set(a) ^ set(b))
assert any(k.startswith("model.") for k in a) and any(k.startswith("optim.") for k in a), sorted(a)[:8]
bad = [k for k in a if not torch.equal(a[k], b[k])]
assert not bad, bad[:5]
