#!/usr/bin/env python3
"""Runs the commands of README.md and docs/*.md so that the docs cannot drift
from the program (ctest's e2e.docs). The rule, documented in docs/testing.md:

  - a fenced block tagged ``sh`` is run (``text``, ``toml`` and others are not);
  - each block runs with bash -e in a scratch directory holding links to the
    checkout's scripts/, plots/, tests/ and .venv, so relative output paths
    (results/..., r.csv) land in the scratch directory;
  - a leading ``scripts/setup.sh [TARGET...] &&`` is dropped (the binary under test is the
    set-up's build), and ``ctest`` only lists the tests (-N): it would run this
    test again;
  - every ``build/ddpbench`` runs at small size on CPU: SMALL below replaces
    those flags where the command gives them and adds them where it does not;
  - ``scripts/compare.py`` and ``scripts/search.py`` run one round
    (``--rounds=1``): their ddpbench runs are small already, and repeating
    them checks nothing more.

    doc_commands.py BIN SRC [BUILD_DIR]      run every block, exit 1 on a failure
    doc_commands.py --list SRC               print the blocks it would run
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

SMALL = {"--device": "cpu", "--model": "resnet18", "--width": "4", "--small-input": None,
         "--image-size": "28", "--batch-size": "8", "--steps": "2", "--warmup": "1",
         "--eval-batches": "1", "--repeat": "1", "--verify-steps": "1"}
DROPPED = ("--epochs",)  # the small run counts --steps instead
NO_RUN = ("--help", "-h", "--list")


def blocks(src):
    """(file:line, text) of every ```sh block of README.md and docs/*.md."""
    found = []
    for path in [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md"))):
        lines = open(path, encoding="utf-8").read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"^```(\S*)\s*$", lines[i])
            if not m:
                i += 1
                continue
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            if m.group(1) == "sh":
                found.append((f"{os.path.relpath(path, src)}:{i + 1}", "\n".join(lines[i + 1:end])))
            i = end + 1
    return found


def small_args(args):
    """The ddpbench arguments with SMALL's flags replacing or added to the command's."""
    if any(a in NO_RUN for a in args):
        return args
    out = [a for a in args if a.split("=", 1)[0] not in SMALL and a.split("=", 1)[0] not in DROPPED]
    return out + [k if v is None else f"{k}={v}" for k, v in SMALL.items()]


def shim(path, real, tool):
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(os.path.abspath(__file__))} "
                f"--exec {tool} {shlex.quote(real)} \"$@\"\n")
    os.chmod(path, 0o755)


def exec_tool(tool, real, args):
    if tool == "ddpbench":
        argv = [real] + small_args(args)
    else:  # ctest: list the tests of the build under test, run none
        args = [a for a in args if a not in ("-j2", "--output-on-failure")]
        if "--test-dir" in args:
            args[args.index("--test-dir") + 1] = real
        argv = [os.environ["DOCS_REAL_CTEST"]] + args + ["-N"]
    print("+ " + " ".join(shlex.quote(a) for a in argv), file=sys.stderr, flush=True)
    os.execvp(argv[0], argv)


ONE_ROUND = re.compile(r"^scripts/(compare|search)\.py ")


def prepare(text):
    out, rounds = [], False  # rounds: inside a compare.py/search.py command (continued lines too)
    for line in text.split("\n"):
        line = re.sub(r"^scripts/setup\.sh( [\w-]+)* && ", "", line)
        if ONE_ROUND.match(line):  # added where the command leaves the default (3)
            line, rounds = ONE_ROUND.sub(lambda m: m.group(0) + "--rounds=1 ", line), True
        if rounds:
            line = re.sub(r"--rounds=\d+", "--rounds=1", line)
        out.append(line)
        rounds = rounds and line.rstrip().endswith("\\")
    return "\n".join(out)


def run_all(binary, src, build_dir):
    failed = []
    for where, text in blocks(src):
        with tempfile.TemporaryDirectory(prefix="ddpbench-docs-") as tmp:
            for name in ("scripts", "plots", "tests", ".venv"):
                if os.path.exists(os.path.join(src, name)):
                    os.symlink(os.path.join(src, name), os.path.join(tmp, name))
            os.makedirs(os.path.join(tmp, "build"))
            os.makedirs(os.path.join(tmp, "results"))
            shim(os.path.join(tmp, "build", "ddpbench"), binary, "ddpbench")
            bindir = os.path.join(tmp, ".docbin")
            os.makedirs(bindir)
            shim(os.path.join(bindir, "ctest"), build_dir, "ctest")
            env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"],
                       DOCS_REAL_CTEST=shutil.which("ctest") or "ctest")
            print(f"== {where}", flush=True)
            try:
                r = subprocess.run(["bash", "-euo", "pipefail", "-c", prepare(text)], cwd=tmp, env=env,
                                   timeout=300, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            except subprocess.TimeoutExpired:
                failed.append(f"{where} (still running after 300 s)")
                continue
            print(r.stdout[-3000:] if r.returncode else r.stdout[-400:], flush=True)
            if r.returncode != 0:
                failed.append(f"{where} (exit {r.returncode})")
    for f in failed:
        print(f"FAIL: the block at {f} does not run as written", flush=True)
    print(f"docs: {len(blocks(src)) - len(failed)}/{len(blocks(src))} blocks ran")
    return 1 if failed else 0


def main():
    if len(sys.argv) > 3 and sys.argv[1] == "--exec":
        exec_tool(sys.argv[2], sys.argv[3], sys.argv[4:])
    if len(sys.argv) == 3 and sys.argv[1] == "--list":
        for where, text in blocks(sys.argv[2]):
            print(f"== {where}\n{prepare(text)}")
        return 0
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    binary, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    build_dir = os.path.abspath(sys.argv[3]) if len(sys.argv) == 4 else os.path.dirname(binary)
    return run_all(binary, src, build_dir)


if __name__ == "__main__":
    sys.exit(main())
