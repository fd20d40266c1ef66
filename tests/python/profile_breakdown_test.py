"""scripts/profile_breakdown.py on made-up traces whose answer is known:
kernels classified by name, the union of overlapping kernels, the gaps
between them, and every figure divided by the steps profiled."""
import unittest

import profile_breakdown as pb


def kernel(name, ts, dur, cat="kernel"):
    return {"cat": cat, "name": name, "ts": ts, "dur": dur}


def step(ts, dur):
    return {"cat": "user_annotation", "name": "ddpbench_step", "ts": ts, "dur": dur}


class Classify(unittest.TestCase):
    def test_kernel_names(self):
        want = {
            "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc": "convolution",
            "void cudnn::batchnorm_fwtr_nhwc_semiPersist<__nv_bfloat16, float>": "batchnorm",
            "void at::native::batch_norm_collect_statistics_channels_last_kernel": "batchnorm",
            "void at::native::vectorized_elementwise_kernel<8, at::native::AddFunctor>": "elementwise",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedSgdMathFunctor>": "optimizer",
            "nvjet_sm90_tst_64x64_64x13_1x2_h_bz_splitK_NTT": "other",
            "autograd::engine::evaluate_function: ConvolutionBackward0": "convolution",
        }
        for name, kind in want.items():
            self.assertEqual(pb.kind_of(name), kind, name)


class Breakdown(unittest.TestCase):
    def test_union_gaps_and_steps(self):
        # Two steps; in each a conv [0,10) overlapping an add [5,12), then a
        # BatchNorm [20,30): busy 22 us of a 30 us window per step, 8 us gap
        # inside the step; 10 us between the steps count as a gap too.
        events = []
        for base in (0, 40):
            events += [kernel("implicit_gemm_conv", base + 0, 10), kernel("elementwise_add", base + 5, 7),
                       kernel("bn_fw_tr_1C11", base + 20, 10), step(base, 3)]
        b = pb.breakdown(events)
        self.assertEqual(b["source"], "device kernels")
        self.assertEqual(b["steps"], 2)
        self.assertAlmostEqual(b["step_ms"], 70 / 1000 / 2)  # window [0, 70)
        self.assertAlmostEqual(b["busy_ms"], 44 / 1000 / 2)
        self.assertAlmostEqual(b["gap_ms"], 26 / 1000 / 2)
        self.assertAlmostEqual(b["host_ms"], 3 / 1000)
        self.assertEqual(b["kinds"]["convolution"]["count"], 1)
        self.assertAlmostEqual(b["kinds"]["batchnorm"]["ms"], 10 / 1000)
        self.assertAlmostEqual(b["kinds"]["elementwise"]["ms"], 7 / 1000)

    def test_copies_are_their_own_kind(self):
        b = pb.breakdown([kernel("Memcpy HtoD (Pinned -> Device)", 0, 4, cat="gpu_memcpy"), kernel("gemm", 4, 6)])
        self.assertAlmostEqual(b["kinds"]["copies"]["ms"], 4 / 1000)
        self.assertAlmostEqual(b["gap_ms"], 0)

    def test_host_operators_when_no_kernels(self):
        # Nested operators are counted once, in their top-level parent.
        events = [{"cat": "cpu_op", "name": "aten::conv2d", "ts": 0, "dur": 10, "tid": 1},
                  {"cat": "cpu_op", "name": "aten::convolution", "ts": 1, "dur": 8, "tid": 1},
                  {"cat": "cpu_op", "name": "aten::relu_", "ts": 12, "dur": 2, "tid": 1}, step(0, 14)]
        b = pb.breakdown(events)
        self.assertEqual(b["source"], "host operators")
        self.assertEqual(b["kinds"]["convolution"]["count"], 1)
        self.assertAlmostEqual(b["kinds"]["convolution"]["ms"], 10 / 1000)
        self.assertAlmostEqual(b["gap_ms"], 2 / 1000)


if __name__ == "__main__":
    unittest.main()
