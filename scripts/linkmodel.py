#!/usr/bin/env python3
"""Alpha-beta models of the links between devices and of the collectives the
strategies run over them (issue 23, its first brick: the cost model's link
part and its calibration from measured collectives).

A link is (alpha, bandwidth): a message of b bytes takes alpha + b / bandwidth
seconds on one hop, in one direction. Collectives of S bytes on n ranks, as
NCCL runs them and nccl-tests accounts for them (algbw = S / t; busbw =
algbw x the factor below, the bandwidth a single link must carry):

  all-reduce, ring   2(n-1) steps of S/n   t = 2(n-1) alpha + 2(n-1)/n S / B   busbw factor 2(n-1)/n
  all-reduce, tree   reduce then broadcast  t = 2 ceil(log2 n) alpha + 2 S / B (pipelined, large S)
  reduce-scatter     (n-1) steps of S/n     t = (n-1) alpha + (n-1)/n S / B     factor (n-1)/n
  all-gather         (n-1) steps of S/n     t = (n-1) alpha + (n-1)/n S / B     factor (n-1)/n
  broadcast          ring, pipelined        t = (n-1) alpha + S / B             factor 1
  point-to-point     one hop                t = alpha + S / B                   factor 1

Across nodes (g devices per node on the intra link, m nodes on the inter
link) a collective runs hierarchically, as NCCL does: reduce-scatter inside
each node, the operation on 1/g of the data across nodes (the node's g
devices in parallel, each over its own share of the node's NICs), then
all-gather inside each node.

Named presets (docs/projection.md gives the source of each figure) replace a
link that cannot be measured here; `fit` turns measured (bytes, seconds) of a
collective into its link's alpha and bandwidth.

    scripts/linkmodel.py time --link=nvlink4 --collective=allreduce --ranks=8 --bytes=1e9
    scripts/linkmodel.py fit results/gbench_collectives_gloo_cpu.json
"""
import argparse
import json
import math
import re
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    name: str
    alpha_s: float  # per message (one step of a collective), seconds
    bandwidth: float  # bytes/s per direction of one device's connection
    source: str = ""


# Bandwidth: per device and direction, from the vendors' figures; alpha: the
# per-step latency order of magnitude of each kind of link (docs/projection.md).
PRESETS = {
    "nvlink4": Link("nvlink4", 3e-6, 450e9, "H100 SXM: NVLink 4, 900 GB/s per GPU in both directions"),
    "pcie4": Link("pcie4", 5e-6, 32e9, "PCIe 4.0 x16: 16 GT/s x 16 lanes, 128b/130b, about 31.5 GB/s per direction"),
    "pcie5": Link("pcie5", 5e-6, 63e9, "PCIe 5.0 x16: 32 GT/s x 16 lanes, about 63 GB/s per direction"),
    "ib-ndr400": Link("ib-ndr400", 5e-6, 50e9, "InfiniBand NDR: 400 Gb/s per port = 50 GB/s per direction"),
    "100gbe": Link("100gbe", 20e-6, 12.5e9, "100 Gb/s Ethernet = 12.5 GB/s per direction"),
    "25gbe": Link("25gbe", 30e-6, 3.125e9, "25 Gb/s Ethernet = 3.125 GB/s per direction"),
}

COLLECTIVES = ("allreduce", "allreduce-tree", "reduce-scatter", "all-gather", "broadcast", "p2p")


def _check(collective, ranks, nbytes):
    if collective not in COLLECTIVES:
        raise ValueError(f"collective {collective!r} is not accepted; accepted: {', '.join(COLLECTIVES)}")
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks={ranks!r}: want an integer >= 1")
    if not nbytes >= 0 or math.isinf(nbytes):
        raise ValueError(f"bytes={nbytes!r}: want a finite number >= 0")


def terms(collective, ranks):
    """(alpha count, bytes factor): t = a x alpha + f x S / bandwidth."""
    n = ranks
    if n == 1:
        return 0.0, 0.0
    return {
        "allreduce": (2 * (n - 1), 2 * (n - 1) / n),
        "allreduce-tree": (2 * math.ceil(math.log2(n)), 2.0),
        "reduce-scatter": (n - 1, (n - 1) / n),
        "all-gather": (n - 1, (n - 1) / n),
        "broadcast": (n - 1, 1.0),
        "p2p": (1, 1.0),
    }[collective]


def busbw_factor(collective, ranks):
    """nccl-tests' busbw / algbw."""
    n = ranks
    return {"allreduce": 2 * (n - 1) / n, "allreduce-tree": 2 * (n - 1) / n, "reduce-scatter": (n - 1) / n,
            "all-gather": (n - 1) / n, "broadcast": 1.0, "p2p": 1.0}[collective]


def collective_time(link, collective, ranks, nbytes):
    """Seconds for `collective` of `nbytes` on `ranks` devices joined by `link`."""
    _check(collective, ranks, nbytes)
    a, f = terms(collective, ranks)
    return a * link.alpha_s + f * nbytes / link.bandwidth


def hierarchical_time(intra, inter, collective, per_node, nodes, nbytes, nics_per_node=None):
    """Seconds on `nodes` x `per_node` devices: intra-node reduce-scatter, the
    collective on 1/per_node of the data across nodes, intra-node all-gather
    (all-reduce); for the others the inter-node part on its share only.
    nics_per_node: NICs each node's devices share (default one per device)."""
    _check(collective, per_node, nbytes)
    _check(collective, nodes, nbytes)
    if nodes == 1:
        return collective_time(intra, collective, per_node, nbytes)
    share = nbytes / per_node
    nics = per_node if nics_per_node is None else nics_per_node
    if nics < 1:
        raise ValueError(f"nics_per_node={nics_per_node!r}: want an integer >= 1")
    # per_node devices cross the nodes at once over `nics` NICs: each gets nics/per_node of one.
    shared = Link(inter.name, inter.alpha_s, inter.bandwidth * min(1.0, nics / per_node), inter.source)
    across = collective_time(shared, collective, nodes, share)
    if collective in ("allreduce", "allreduce-tree"):
        return (collective_time(intra, "reduce-scatter", per_node, nbytes) + across +
                collective_time(intra, "all-gather", per_node, nbytes))
    if collective == "p2p":
        return collective_time(inter, "p2p", 2, nbytes)
    return collective_time(intra, collective, per_node, nbytes) + across


def fit(points, collective, ranks, name="fitted"):
    """The Link whose model is closest to measured (bytes, seconds) points of
    one collective on `ranks`, least squares on relative error (the sizes
    span orders of magnitude, so each point counts alike)."""
    _check(collective, ranks, 0)
    pts = [(float(b), float(t)) for b, t in points]
    if len(pts) < 2 or len({b for b, _ in pts}) < 2:
        raise ValueError(f"fit: need points at two sizes at least, got {len(pts)}")
    if any(t <= 0 or b < 0 for b, t in pts):
        raise ValueError("fit: every time must be > 0 and every size >= 0")
    a_count, factor = terms(collective, ranks)
    if a_count == 0:
        raise ValueError("fit: a collective on 1 rank moves nothing")
    # t = x0 + x1 b with x0 = a_count alpha, x1 = factor / bandwidth; rows weighted by 1/t.
    s00 = s01 = s11 = r0 = r1 = 0.0
    for b, t in pts:
        w = 1.0 / (t * t)
        s00, s01, s11, r0, r1 = s00 + w, s01 + w * b, s11 + w * b * b, r0 + w * t, r1 + w * t * b
    det = s00 * s11 - s01 * s01
    x0 = (s11 * r0 - s01 * r1) / det
    x1 = (s00 * r1 - s01 * r0) / det
    if x1 <= 0:
        raise ValueError("fit: the times do not grow with the size; no bandwidth can be fitted")
    return Link(name, max(x0, 0.0) / a_count, factor / x1, f"fitted to {len(pts)} measured {collective} sizes")


GBENCH_NAMES = {"allreduce": "allreduce", "reduce_scatter": "reduce-scatter", "allgather": "all-gather",
                "broadcast": "broadcast"}


def gbench_points(path):
    """{collective: [(bytes, seconds)]} of a Google Benchmark JSON of ddpbench's
    BM_Gloo_* / BM_Nccl_* collectives (tests/bench), and the rank count."""
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for b in doc.get("benchmarks", []):
        m = re.match(r"BM_(?:Gloo|Nccl)_([a-z_]+)/(\d+)", b.get("name", ""))
        if not m or m.group(1) not in GBENCH_NAMES or b.get("run_type") == "aggregate":
            continue
        unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b.get("time_unit", "ns")]
        out.setdefault(GBENCH_NAMES[m.group(1)], []).append((int(m.group(2)), b["real_time"] * unit))
    if not out:
        raise ValueError(f"{path}: no BM_Gloo_/BM_Nccl_ collective results")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("time", help="one collective's time, algbw and busbw on a preset link")
    t.add_argument("--link", default="nvlink4", help=f"one of {', '.join(PRESETS)}")
    t.add_argument("--collective", default="allreduce", help=f"one of {', '.join(COLLECTIVES)}")
    t.add_argument("--ranks", type=int, default=8)
    t.add_argument("--bytes", type=float, default=1e9)
    f = sub.add_parser("fit", help="alpha and bandwidth per collective from a Google Benchmark JSON")
    f.add_argument("json")
    f.add_argument("--ranks", type=int, default=2, help="ranks the benchmark ran on (default 2)")
    a = p.parse_args(argv)
    try:
        if a.cmd == "time":
            if a.link not in PRESETS:
                raise ValueError(f"--link={a.link} is not accepted; accepted: {', '.join(PRESETS)}")
            link = PRESETS[a.link]
            s = collective_time(link, a.collective, a.ranks, a.bytes)
            algbw = a.bytes / s if s > 0 else float("inf")
            print(f"{a.collective} of {a.bytes:.4g} B on {a.ranks} x {link.name}: {s * 1e3:.4g} ms, "
                  f"algbw {algbw / 1e9:.4g} GB/s, busbw {algbw * busbw_factor(a.collective, a.ranks) / 1e9:.4g} GB/s")
        else:
            for collective, pts in sorted(gbench_points(a.json).items()):
                link = fit(pts, collective, a.ranks, name=collective)
                print(f"{collective:15s} alpha {link.alpha_s * 1e6:8.1f} us  bandwidth {link.bandwidth / 1e9:7.3f} GB/s"
                      f"  ({len(pts)} sizes)")
    except (ValueError, OSError) as e:
        sys.exit(f"linkmodel: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
