"""Whether a run's snapshots survived its faults: none broken, none mixed, none lost.

A fault drill (scripts/chaos.py, tests/e2e/elastic.sh) kills ranks or whole
agents while snapshots are written; afterwards it asks two questions here,
without torch (manifests and rank files are read as bytes):

  manifest_problem(MANIFEST)  -> None, or what is wrong with one snapshot: a
      rank file missing, of the wrong size or checksum (broken), or files of
      another step or a count other than the writer's ranks (mixed)
  resumed_steps(LOG_TEXTS)    -> the step each resume started from, in order
  resume_problems(LOG_TEXTS)  -> each resume of the run that started from an
      older snapshot than the newest logged before it (lost), read from ddpbench's logs
"""
import hashlib
import json
import os
import re

_LINE_TIME = r"^\[(\d\d):(\d\d):(\d\d\.\d+)\] "
SNAPSHOT_LINE = re.compile(_LINE_TIME + r"\[rank \d+\] \[info\] snapshot at step (\d+): ")
RESUME_LINE = re.compile(_LINE_TIME + r"\[rank \d+\] \[info\] resuming from (\S+): step (\d+),")


def manifest_problem(manifest):
    """None when every rank file the manifest names is there, whole and of its own step."""
    try:
        body = json.load(open(manifest))
        files = body["files"]
        ranks = int(body["layout"]["world"])
    except (OSError, ValueError, KeyError) as e:
        return f"BROKEN manifest {os.path.basename(manifest)} ({e.__class__.__name__})"
    stem = os.path.basename(manifest)[:-len(".json")]
    if len(files) != ranks or sorted(f["rank"] for f in files) != list(range(ranks)):
        return f"MIXED ({len(files)} rank files for {ranks} ranks in {os.path.basename(manifest)})"
    for f in files:
        if f["file"] != f"{stem}.rank{f['rank']}.pt":
            return f"MIXED ({f['file']} in {os.path.basename(manifest)})"
        try:
            data = open(os.path.join(os.path.dirname(manifest), f["file"]), "rb").read()
        except OSError:
            return f"BROKEN ({f['file']} missing)"
        if len(data) != f["bytes"] or hashlib.sha1(data).hexdigest() != f["sha1"]:
            return f"BROKEN ({f['file']})"
    return None


def step_of(manifest):
    return int(re.search(r"-step0*(\d+)\.json$", manifest).group(1))


def _seconds(match):
    h, m, s = match.group(1, 2, 3)
    return int(h) * 3600 + int(m) * 60 + float(s)


def _events(log_texts):
    """(seconds of the day, step) of each snapshot and (seconds, step, manifest) of each resume, in time order."""
    snapshots, resumes = [], []
    for text in log_texts:
        for line in text.splitlines():
            if m := SNAPSHOT_LINE.match(line):
                snapshots.append((_seconds(m), int(m.group(4))))
            elif m := RESUME_LINE.match(line):
                resumes.append((_seconds(m), int(m.group(5)), m.group(4)))
    return sorted(snapshots), sorted(resumes)


def resumed_steps(log_texts):
    """The step each resume of the run started from, in order."""
    return [step for _, step, _ in _events(log_texts)[1]]


def resume_problems(log_texts):
    """Each resume from a step older than the newest snapshot logged before it (all ranks' logs, any
    agent). A newer one is fine: a rank killed right after writing a snapshot may not have logged it."""
    snapshots, resumes = _events(log_texts)
    problems = []
    for t, step, name in resumes:
        newest = max((s for ts, s in snapshots if ts < t), default=None)
        if newest is not None and step < newest:
            problems.append(f"LOST: resumed from step {step} ({os.path.basename(name)}) while step {newest} "
                            "was the newest snapshot")
    return problems
