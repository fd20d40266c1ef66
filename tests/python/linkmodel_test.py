#!/usr/bin/env python3
"""Tests of scripts/linkmodel.py (issue 23's link model): the collective
formulas against nccl-tests' busbw definitions, hierarchical collectives, the
fit recovering a known link and fitting the project's measured Gloo
collectives, and bad inputs."""
import json
import math
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import linkmodel as L  # noqa: E402


class Formulas(unittest.TestCase):
    def test_large_messages_reach_the_link_bandwidth_as_busbw(self):
        # For large S the alpha terms vanish: busbw = the link's bandwidth, nccl-tests' point.
        link = L.Link("x", 1e-6, 100e9)
        for coll in ("allreduce", "reduce-scatter", "all-gather", "broadcast"):
            for n in (2, 4, 8, 64):
                s = 1e12
                t = L.collective_time(link, coll, n, s)
                self.assertAlmostEqual(s / t * L.busbw_factor(coll, n) / 100e9, 1.0, places=4, msg=(coll, n))

    def test_small_messages_cost_the_steps_latency(self):
        link = L.Link("x", 5e-6, 1e12)
        self.assertAlmostEqual(L.collective_time(link, "allreduce", 8, 0), 14 * 5e-6)
        self.assertAlmostEqual(L.collective_time(link, "allreduce-tree", 8, 0), 6 * 5e-6)
        self.assertAlmostEqual(L.collective_time(link, "p2p", 2, 0), 5e-6)
        self.assertEqual(L.collective_time(link, "allreduce", 1, 1e9), 0.0)

    def test_hierarchical_is_flat_on_one_node_and_slower_across_a_slow_link(self):
        nv, ib = L.PRESETS["nvlink4"], L.PRESETS["ib-ndr400"]
        one = L.hierarchical_time(nv, ib, "allreduce", 8, 1, 1e9)
        self.assertAlmostEqual(one, L.collective_time(nv, "allreduce", 8, 1e9))
        two = L.hierarchical_time(nv, ib, "allreduce", 8, 2, 1e9)
        # Inter-node: 1/8 of the data over each GPU's own NIC, 2 nodes: 2 x (1/2) x S/8 / 50 GB/s.
        inter = 2 * ib.alpha_s + 1e9 / 8 / 50e9
        intra = L.collective_time(nv, "reduce-scatter", 8, 1e9) + L.collective_time(nv, "all-gather", 8, 1e9)
        self.assertAlmostEqual(two, intra + inter)
        # One NIC shared by 8 GPUs: the inter-node part 8 times slower in bandwidth.
        shared = L.hierarchical_time(nv, ib, "allreduce", 8, 2, 1e9, nics_per_node=1)
        self.assertAlmostEqual(shared - intra, 2 * ib.alpha_s + 1e9 / 50e9, places=9)

    def test_bad_inputs_name_the_value(self):
        link = L.PRESETS["pcie4"]
        for args, text in ((("gather", 2, 1), "collective 'gather'"), (("allreduce", 0, 1), "ranks=0"),
                           (("allreduce", 2, -1), "bytes=-1"), (("allreduce", 2, float("nan")), "bytes=nan")):
            with self.assertRaises(ValueError) as e:
                L.collective_time(link, *args)
            self.assertIn(text, str(e.exception))


class Fit(unittest.TestCase):
    def test_recovers_a_known_link(self):
        truth = L.Link("t", 40e-6, 2.5e9)
        pts = [(s, L.collective_time(truth, "allreduce", 4, s)) for s in (1 << 10, 1 << 14, 1 << 20, 1 << 24, 1 << 28)]
        got = L.fit(pts, "allreduce", 4)
        self.assertAlmostEqual(got.alpha_s / truth.alpha_s, 1.0, places=6)
        self.assertAlmostEqual(got.bandwidth / truth.bandwidth, 1.0, places=6)

    def test_fits_the_measured_gloo_collectives(self):
        path = os.path.join(ROOT, "results", "gbench_collectives_gloo_cpu.json")
        points = L.gbench_points(path)
        self.assertEqual(sorted(points), ["all-gather", "allreduce", "broadcast", "reduce-scatter"])
        for coll, pts in points.items():
            link = L.fit(pts, coll, 2)
            self.assertGreater(link.alpha_s, 0, coll)
            self.assertGreater(link.bandwidth, 0, coll)
            # Loopback TCP on a VM shared with other builds (load 9.5 when measured, few
            # iterations at the largest sizes): the median size within 35%, none off by 4x.
            errors = sorted(abs(math.log(L.collective_time(link, coll, 2, b) / t)) for b, t in pts)
            self.assertLess(errors[len(errors) // 2], math.log(1.35), (coll, errors))
            self.assertLess(errors[-1], math.log(4), (coll, errors))

    def test_refuses_what_cannot_be_fitted(self):
        with self.assertRaises(ValueError):
            L.fit([(1, 1e-3)], "allreduce", 2)
        with self.assertRaises(ValueError) as e:
            L.fit([(1, 2e-3), (1 << 20, 1e-3)], "allreduce", 2)
        self.assertIn("do not grow", str(e.exception))
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump({"benchmarks": [{"name": "BM_Other/1"}]}, f)
            f.flush()
            with self.assertRaises(ValueError):
                L.gbench_points(f.name)

    def test_command_line(self):
        self.assertEqual(L.main(["time", "--link=ib-ndr400", "--collective=reduce-scatter", "--ranks=4"]), 0)
        with self.assertRaises(SystemExit) as e:
            L.main(["time", "--link=ethernet"])
        self.assertIn("--link=ethernet is not accepted", str(e.exception.code))


if __name__ == "__main__":
    unittest.main()
