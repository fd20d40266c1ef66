#!/usr/bin/env python3
"""Checks tests/data/imagefolder_order.txt, the order the C++ ImageFolder
scan is tested against (tests/imagefolder_test.cpp), with torchvision's own
ImageFolder on the tree of tests/data/imagefolder_tree.txt: the same classes,
labels and sample order. Skipped where torchvision is not installed."""
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def lines(name):
    with open(os.path.join(DATA, name)) as f:
        return [l.rstrip("\n") for l in f if l.strip() and not l.startswith("#")]


class ImageFolderOrder(unittest.TestCase):
    def test_torchvision_agrees(self):
        try:
            from torchvision.datasets import ImageFolder
        except ImportError:
            self.skipTest("torchvision is not installed")
        with tempfile.TemporaryDirectory() as root:
            for rel in lines("imagefolder_tree.txt"):
                os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
                open(os.path.join(root, rel), "wb").close()
            got = []
            train = ImageFolder(os.path.join(root, "train"), loader=lambda p: p)
            val_classes = {c: train.class_to_idx[c] for c in sorted(os.listdir(os.path.join(root, "val")))}
            val = ImageFolder(os.path.join(root, "val"), loader=lambda p: p)
            val_samples = [(p, val_classes[val.classes[t]]) for p, t in val.samples]
            for path, label in train.samples + val_samples:
                got.append(f"{label} {os.path.relpath(path, root)}")
        self.assertEqual(got, lines("imagefolder_order.txt"))
        self.assertEqual(train.classes, ["B", "a", "a-b", "a_b", "c"])


if __name__ == "__main__":
    unittest.main()
