"""scripts/report.py's rounds_summary (scripts/compare.py's table): one row per
strategy with the median throughput over its rounds and their spread."""
import unittest

# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
import report


def row(strategy, tput, step, gpus="2"):
    return {"entry": strategy, "strategy": strategy, "gpus": gpus, "throughput_img_s": str(tput),
            "step_ms_p50": str(step), "model": "resnet18", "width": "4", "world_size": gpus}


class RoundsSummary(unittest.TestCase):
    def test_median_spread_and_rounds_per_strategy(self):
        rows = [row("single", 10, 100, "1"), row("ddp", 30, 40), row("ddp", 10, 60), row("single", 12, 90, "1"),
                row("ddp", 20, 50), row("single", 11, 95, "1")]
        out = {r["strategy"]: r for r in report.rounds_summary(rows)}
        self.assertEqual(sorted(out), ["ddp", "single"])
        self.assertEqual(out["ddp"]["throughput_img_s"], "20.00")
        self.assertEqual(out["ddp"]["step_ms_p50"], "50.0")
        self.assertEqual(out["ddp"]["throughput_spread"], "10.00-30.00 (+-50%)")
        self.assertEqual(out["ddp"]["rounds"], "3")
        self.assertEqual(out["single"]["throughput_img_s"], "11.00")

    def test_table_has_median_and_spread_columns(self):
        header, body = report.strategy_table(report.rounds_summary([row("pmp", 4, 1), row("pmp", 6, 1)]),
                                             report.ROUNDS_COLUMNS)
        cells = dict(zip(header, body[0]))
        self.assertEqual(cells["img/s median"], "5.00")
        self.assertEqual(cells["spread min-max"], "4.00-6.00 (+-20%)")
        self.assertEqual(cells["rounds"], "2")


if __name__ == "__main__":
    unittest.main()
