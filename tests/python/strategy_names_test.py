#!/usr/bin/env python3
"""A strategy is described in one place: its own file, its traits row
(planning/traits.cpp) and its factory line (strategies/registry.cpp). Every
other C++ file asks the traits (family, ZeRO stage, flags read, ...), never
compares a strategy's name: this test fails on a comparison such as
`strategy == "pmp"`, `"zero3" != name`, `strategy.back()` or
`rfind("zero", 0)` anywhere else in the program's sources."""
import glob
import os
import re
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
NAMES = r"(single|dp|ddp|mp|pmp|zero[123]?|hsdp)"
COMPARISON = re.compile(rf'[=!]=\s*"{NAMES}"|"{NAMES}"\s*[=!]=|strategy\.back\(\)|rfind\("zero"')
# A list of names typed out ("zero1|zero2|zero3" in a message, {"ddp", "zero1"} as a default): such lists
# come from the traits (StrategiesWhere, StrategiesReading), so a new strategy appears in every one.
TYPED_LIST = re.compile(rf'\b{NAMES}(\|{NAMES}\b)+|"{NAMES}"\s*,\s*"{NAMES}"')
OWNERS = {"strategies/single.cpp", "strategies/data/dp.cpp", "strategies/data/ddp.cpp", "strategies/pipeline/mp.cpp",
          "strategies/pipeline/pmp.cpp", "strategies/sharded/zero1.cpp", "strategies/sharded/zero2.cpp",
          "strategies/sharded/zero3.cpp", "strategies/registry.cpp", "planning/traits.cpp"}


def offenders(root, pattern=COMPARISON):
    found = []
    for folder in ["base", "planning", "projection", "models", "harness", "datasets", "strategies", "app"]:
        for path in sorted(glob.glob(os.path.join(root, folder, "**", "*.[ch]*"), recursive=True)):
            rel = os.path.relpath(path, root)
            if rel in OWNERS:
                continue
            for n, line in enumerate(open(path, encoding="utf-8"), 1):
                if pattern.search(line.split("//")[0]):
                    found.append(f"{rel}:{n}: {line.strip()}")
    return found


class StrategyNames(unittest.TestCase):
    def test_no_name_is_compared_outside_its_owners(self):
        self.assertEqual(offenders(ROOT), [])

    def test_no_list_of_names_is_typed_outside_its_owners(self):
        self.assertEqual(offenders(ROOT, TYPED_LIST), [])

    def test_the_list_pattern_catches_lists_not_single_names(self):
        for line in ['"or use ddp|zero1|zero2"', 'std::vector<std::string>{"ddp", "zero1"}', '"zero1|zero2|zero3: x"']:
            self.assertTrue(TYPED_LIST.search(line), line)
        for line in ['{"ddp", 3.7}', '"--strategy=pmp"', '"reduce-scatter|all-reduce"']:
            self.assertFalse(TYPED_LIST.search(line), line)

    def test_the_pattern_catches_the_forms_it_names(self):
        for line in ['if (c.strategy == "pmp") {', 'x = "zero3" != s;', 'int stage = q.strategy.back() - \'0\';',
                     'c.strategy.rfind("zero", 0) == 0']:
            self.assertTrue(COMPARISON.search(line), line)
        self.assertFalse(COMPARISON.search('{"--chunks", "pmp"}'))


if __name__ == "__main__":
    unittest.main()
