"""scripts/compare.py's entries: a strategy, or a strategy with flags of its
own after '+' (dashes dropped, ':' for '='), so that one comparison holds the
one-dimensional strategies and the hybrids."""
import unittest
from unittest import mock

# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
import compare


class Entries(unittest.TestCase):
    def test_flags_after_plus(self):
        self.assertEqual(compare.split_entry("zero3"), ("zero3", []))
        self.assertEqual(compare.split_entry("pmp+stage-ranks+replicate-degree:2"),
                         ("pmp", ["--stage-ranks", "--replicate-degree=2"]))

    def test_parse_checks_the_strategy_and_refuses_an_empty_flag(self):
        with mock.patch.object(compare, "registered", return_value=["single", "zero3", "pmp"]):
            args = compare.parse_args(["--strategies=pmp+stage-ranks,zero3+replicate-degree:2,single"])
            self.assertEqual(args.strategies, ["single", "pmp+stage-ranks", "zero3+replicate-degree:2"])
            for bad in ("ddp+replicate-degree:2", "pmp+"):
                with self.assertRaises(SystemExit), mock.patch("sys.stderr"):
                    compare.parse_args([f"--strategies={bad}"])


if __name__ == "__main__":
    unittest.main()
