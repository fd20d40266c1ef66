"""A ddpbench snapshot's logical training state in Python, whatever layout
wrote it: the manifest's "state" says which slices of each logical tensor
("model.layer1.0.conv1.weight", "optim.<name>.exp_avg", ...) every rank file
holds (harness/state_layout.h); this module puts them back together.

  logical_state(MANIFEST) -> {name: tensor}
  python3 scripts/ddpbench_py/snapshot_state.py A.json B.json [--atol=X] [--all]
      compares two snapshots' model tensors (--all: every logical tensor,
      the optimizer's and the loss scaler's too); exits 1 beyond atol (0: bit-identical)
"""
import json
import os
import sys

import torch
import torch.jit._pickle

torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])  # C++ pickle_save's dict tag

_DTYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16,
           "Long": torch.int64, "Int": torch.int32, "Byte": torch.uint8, "Bool": torch.bool}


def logical_state(manifest):
    """The logical tensors of the snapshot whose manifest is `manifest`."""
    body = json.load(open(manifest))
    if "state" not in body:
        raise ValueError(f"{manifest}: no state description (written by a build that did not describe its state)")
    folder = os.path.dirname(manifest)
    files = {}

    def rank_file(rank):
        if rank not in files:
            files[rank] = torch.load(os.path.join(folder, body["files"][rank]["file"]), weights_only=True)
        return files[rank]

    state = body["state"]
    flat = {name: torch.zeros(torch.Size(shape).numel(), dtype=_DTYPES[dtype])
            for name, (dtype, shape) in state["logical"].items()}
    for name in state["whole"]:
        flat[name] = rank_file(0)[name].reshape(-1)
    for logical, begin, length, holder, stored, offset in state["pieces"]:
        flat[logical][begin:begin + length] = rank_file(holder)[stored].reshape(-1)[offset:offset + length]
    return {name: flat[name].reshape(shape) for name, (_, shape) in state["logical"].items()}


def max_model_difference(a, b, prefix="model."):
    """Largest |a - b| over the tensors named prefix... of two logical states (same names)."""
    names = sorted(n for n in a if n.startswith(prefix))
    if names != sorted(n for n in b if n.startswith(prefix)):
        raise ValueError(f"the snapshots hold different {prefix or 'logical'} tensors")
    return max((a[n].double() - b[n].double()).abs().max().item() for n in names if a[n].numel())


if __name__ == "__main__":
    atol = float(next((x.split("=", 1)[1] for x in sys.argv[3:] if x.startswith("--atol=")), "0"))
    every = "--all" in sys.argv[3:]
    diff = max_model_difference(logical_state(sys.argv[1]), logical_state(sys.argv[2]), "" if every else "model.")
    print(f"max |{'logical state' if every else 'model'} difference| = {diff:.3e}")
    sys.exit(0 if diff <= atol else 1)
