#!/usr/bin/env python3
"""Checks that ddpbench's RandomResizedCrop draws crops distributed as
torchvision's: the scale and aspect-ratio histograms of 10,000 C++ draws
(tests/data/crop_histograms.txt, which tests/imagefolder_test.cpp keeps equal
to the C++ sampler's output) against 10,000 draws of
torchvision.transforms.RandomResizedCrop.get_params on the same 375 x 500
image, by a two-sample chi-square test per histogram. Skipped where
torchvision is not installed."""
import math
import os
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "crop_histograms.txt")
BINS, DRAWS, HEIGHT, WIDTH = 10, 10000, 375, 500
# The chi-square distribution's 99.9th percentile at 9 degrees of freedom:
# two samples of one distribution exceed it one time in a thousand.
CHI2_9_P999 = 27.877


def committed():
    with open(DATA) as f:
        rows = [l.split() for l in f if l.strip() and not l.startswith("#")]
    return {r[0]: [int(x) for x in r[1:]] for r in rows}


def bin_of(x, lo, hi):
    return min(BINS - 1, max(0, int((x - lo) / (hi - lo) * BINS)))


def torchvision_histograms():
    import torch
    from torchvision.transforms import RandomResizedCrop
    torch.manual_seed(0)
    image = torch.empty(3, HEIGHT, WIDTH)
    scale, ratio, fallback = [0] * BINS, [0] * BINS, 0
    for _ in range(DRAWS):
        top, left, h, w = RandomResizedCrop.get_params(image, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
        scale[bin_of(h * w / (HEIGHT * WIDTH), 0.08, 1.0)] += 1
        ratio[bin_of(math.log(w / h), math.log(3 / 4), math.log(4 / 3))] += 1
        fallback += (top, left, h, w) == (0, 0, HEIGHT, WIDTH)
    return {"scale": scale, "log_ratio": ratio, "fallback": [fallback]}


def chi_square(a, b):
    """Two-sample chi-square statistic of equally sized samples' bin counts."""
    return sum((x - y) ** 2 / (x + y) for x, y in zip(a, b) if x + y)


class CropStatistics(unittest.TestCase):
    def test_statistic_tells_different_distributions_apart(self):
        uniform = [DRAWS // BINS] * BINS
        skewed = [1300] * 5 + [700] * 5
        self.assertLess(chi_square(uniform, uniform), CHI2_9_P999)
        self.assertGreater(chi_square(uniform, skewed), CHI2_9_P999)

    def test_histograms_match_torchvision(self):
        try:
            import torchvision  # noqa: F401
        except ImportError:
            self.skipTest("torchvision is not installed")
        ours, theirs = committed(), torchvision_histograms()
        for name in ("scale", "log_ratio"):
            self.assertEqual(sum(ours[name]), DRAWS)
            stat = chi_square(ours[name], theirs[name])
            self.assertLess(stat, CHI2_9_P999, f"{name}: ddpbench {ours[name]} vs torchvision {theirs[name]}")
        self.assertLessEqual(abs(ours["fallback"][0] - theirs["fallback"][0]), 10)


if __name__ == "__main__":
    unittest.main()
