#!/usr/bin/env python3
"""The commit that made a nightly entry slower: builds commits between GOOD
(the last good night's git revision) and BAD (the first bad night's) in a
worktree beside the checkout and runs the entry on each against GOOD in
interleaved A/B rounds (scripts/ddpbench_py/ab_rounds.py), bisecting to the
first commit whose median throughput is below GOOD's by at least half the
change the gate detected. The gate prints this command under a change point. (Not "bisect.py": a
file of that name in scripts/ would stand in for Python's own bisect module,
which statistics imports, in every script here.)

    scripts/bisect_slow.py ddp-2x1 3f2a1c0 9be47d1 --matrix=scripts/matrix/cpu-small.toml --drop=0.06

A commit counts as slow when its median ratio over the rounds is below
1 - drop/2; its confidence is a one-sided t-test on the rounds' log ratios.
BAD is measured first: if it is not slow, nothing is named (exit 1). The
worktree (<checkout>-bisect) and each commit's binary are kept, so a second
bisect rebuilds only what changed. --build is the command that builds a
commit's binary in the worktree (default: the checkout's scripts/setup.sh
ddpbench, with the checkout's .venv).
"""
import argparse
import os
import shlex
import shutil
import subprocess
import sys

from ddpbench_py import ab_rounds
import nightly


class BadInput(Exception):
    pass


def git(*args, cwd=None, check=True):
    done = subprocess.run(["git", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and done.returncode:
        raise BadInput(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done


def commit_of(name, top):
    done = git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", cwd=top, check=False)
    if done.returncode:
        raise BadInput(f"{name}: not a commit of {top} (accepted: a revision git rev-parse knows, e.g. a night's git_sha)")
    return done.stdout.strip()


def commits_between(good, bad, top):
    """The commits after GOOD up to BAD, oldest first; refuses a dirty tree or GOOD not an ancestor of BAD."""
    if git("status", "--porcelain", "--untracked-files=no", cwd=top).stdout.strip():
        raise BadInput(f"{top}: the work tree has uncommitted changes; commit or stash them first")
    g, b = commit_of(good, top), commit_of(bad, top)
    if g == b or git("merge-base", "--is-ancestor", g, b, cwd=top, check=False).returncode:
        raise BadInput(f"GOOD {good} is not an ancestor of BAD {bad}; accepted: GOOD before BAD on BAD's history")
    return g, git("rev-list", "--reverse", "--ancestry-path", f"{g}..{b}", cwd=top).stdout.split()


def find_entry(matrix, name):
    defaults, runs = nightly.load_matrix(matrix)
    for entry in runs:
        if entry["name"] == name:
            return defaults, entry
    raise BadInput(f"{name}: no such entry in {matrix} (entries: {', '.join(r['name'] for r in runs)})")


class Builds:
    """Each commit's binary, built once in the worktree beside the checkout."""

    def __init__(self, top, build, binary):
        self.top, self.build, self.binary = top, build, binary
        self.tree = os.path.join(os.path.dirname(top), os.path.basename(top) + "-bisect")
        self.bins = self.tree + "-bins"

    def __call__(self, sha):
        kept = os.path.join(self.bins, sha, os.path.basename(self.binary))
        if os.path.exists(kept):
            return kept
        if not os.path.isdir(self.tree):
            git("worktree", "add", "--detach", self.tree, sha, cwd=self.top)
        git("checkout", "--detach", "--quiet", sha, cwd=self.tree)
        print(f"   building {sha[:10]} in {self.tree}", flush=True)
        log = os.path.join(self.tree + "-bins", sha + ".build.log")
        os.makedirs(os.path.dirname(log), exist_ok=True)
        with open(log, "w") as f:
            env = dict(os.environ, CHECKOUT=self.top)
            if subprocess.run(self.build, shell=True, cwd=self.tree, stdout=f, stderr=subprocess.STDOUT, env=env).returncode:
                raise RuntimeError(f"building {sha[:10]} failed; see {log}")
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        shutil.copy2(os.path.join(self.tree, self.binary), kept)
        return kept


def subject(sha, top):
    return git("log", "-1", "--format=%h %s", sha, cwd=top).stdout.strip()


def probe(args, builds, good, sha, command):
    comparison = ab_rounds.compare(("good", builds(good)), ("test", builds(sha)), command, args.rounds,
                                   os.path.join(builds.bins, "runs", f"{good[:10]}-{sha[:10]}"))
    if not comparison.ratios:
        raise RuntimeError(f"{sha[:10]}: no round in which both builds ran; see {builds.bins}/runs")
    slow = comparison.median < 1 - args.drop / 2
    print(f"   {subject(sha, builds.top)}: {comparison.median:.3f} of GOOD's throughput over {len(comparison.ratios)} "
          f"rounds ({', '.join(f'{r:.3f}' for r in comparison.ratios)}) -> {'slow' if slow else 'not slow'}", flush=True)
    return slow, comparison


def bisect(args, top):
    good, between = commits_between(args.good, args.bad, top)
    defaults, entry = find_entry(args.matrix, args.entry)
    builds = Builds(top, args.build, args.binary)

    def command(binary, out_csv, run_id):
        return nightly.command(binary, defaults, entry, out_csv, run_id)

    print(f"bisect {args.entry}: {len(between)} commits after {good[:10]}; slow means below {1 - args.drop / 2:.3f} "
          f"of GOOD's median throughput ({args.rounds} interleaved rounds each)", flush=True)
    lo, hi = -1, len(between) - 1
    slow, found = probe(args, builds, good, between[hi], command)
    if not slow:
        print(f"BAD {args.bad} is not slower than GOOD in interleaved rounds; no commit to name")
        return 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        slow, comparison = probe(args, builds, good, between[mid], command)
        if slow:
            hi, found = mid, comparison
        else:
            lo = mid
    parent = between[lo] if lo >= 0 else good
    print(f"first slow commit: {subject(between[hi], top)}: {found.median:.3f} of GOOD's median throughput "
          f"(confidence {100 * (1 - found.slower_p()):.1f}% that it is slower, t-test over {len(found.ratios)} rounds); "
          f"its parent {parent[:10]} is not slow")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("entry", help="the matrix entry the gate named")
    p.add_argument("good", help="the last good night's git revision")
    p.add_argument("bad", help="the first bad night's git revision")
    p.add_argument("--matrix", default="scripts/matrix/cpu-small.toml", help="the nightly matrix holding the entry")
    p.add_argument("--drop", type=float, default=0.05, help="the change the gate detected, as a fraction (0.06: 6%% slower)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds per commit")
    p.add_argument("--build", default='ln -sfn "$CHECKOUT/.venv" .venv && scripts/setup.sh ddpbench',
                   help="shell command building a commit's binary in the worktree ($CHECKOUT: the checkout)")
    p.add_argument("--binary", default="build/ddpbench", help="the built binary, relative to the worktree")
    args = p.parse_args()
    if not 0 < args.drop < 1:
        p.error(f"--drop={args.drop}: must be a fraction between 0 and 1")
    if args.rounds < 2:
        p.error(f"--rounds={args.rounds}: must be at least 2 (a confidence needs two rounds)")
    top = git("rev-parse", "--show-toplevel", check=False).stdout.strip()
    try:
        if not top:
            raise BadInput(f"{os.getcwd()}: not inside a git checkout")
        sys.exit(bisect(args, top))
    except (BadInput, nightly.MatrixError) as e:
        print(f"bisect: {e}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as e:
        print(f"bisect: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
