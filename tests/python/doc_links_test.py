#!/usr/bin/env python3
"""Every relative link of the user docs (README.md, docs/, research/,
results/README.md) points at a file of the checkout, and every #anchor into a
Markdown page at one of its headings (GitHub's slugs): a page moved or a
section renamed cannot leave a dead link behind."""
import glob
import os
import re
import unittest

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```")


def pages(root):
    found = [os.path.join(root, "README.md"), os.path.join(root, "results", "README.md")]
    for folder in ["docs", "research"]:
        found += sorted(glob.glob(os.path.join(root, folder, "*.md")))
    return [p for p in found if os.path.exists(p)]


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


def anchors(path):
    out, fenced = set(), False
    for line in lines(path):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def dead_links(root):
    dead = []
    for page in pages(root):
        fenced = False
        for n, line in enumerate(lines(page), 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # http:, https:, mailto:, file:
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = f"{os.path.relpath(page, root)}:{n}: {target}"
                if not os.path.exists(full):
                    dead.append(where + " (no such file)")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    dead.append(where + " (no such heading)")
    return dead


class DocLinks(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        self.assertEqual(dead_links(ROOT), [])

    def test_slugs_follow_githubs_rule(self):
        self.assertEqual(slug(" What a run prints"), "what-a-run-prints")
        self.assertEqual(slug("Fused BatchNorm, add and ReLU"), "fused-batchnorm-add-and-relu")
        self.assertEqual(slug("The what-if table (`ddpbench --project=FILE`)"), "the-what-if-table-ddpbench---projectfile")


if __name__ == "__main__":
    unittest.main()
