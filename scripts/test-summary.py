#!/usr/bin/env python3
"""test-summary.py - after the stages of test.sh, name every test that did not
pass, with the last lines of its output.

CI keeps only the end of a run's output, so a failure in the first stage
(printed half an hour earlier) would otherwise be out of sight.  Reads each
build directory's meson-logs/testlog.json (one JSON object per test run).

usage: test-summary.py BUILDDIR...
"""
import json
import os
import sys

PASSING = {"OK", "SKIP", "EXPECTEDFAIL"}
TAIL_LINES = 12   # of one failing test's output
MAX_SHOWN = 6     # failing tests shown with their output, per build


def failures(builddir):
    path = os.path.join(builddir, "meson-logs", "testlog.json")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError as e:
        return None, f"no test log ({e.strerror})"
    out = []
    for line in lines:
        try:
            t = json.loads(line)
        except ValueError:
            continue
        if t.get("result") not in PASSING:
            out.append(t)
    return out, None


def main(argv):
    bad = 0
    for b in argv[1:]:
        fails, why = failures(b)
        if fails is None:
            print(f"== {b}: {why}")
            continue
        print(f"== {b}: {len(fails)} not passed")
        for i, t in enumerate(fails):
            bad += 1
            print(f"   {t.get('result')}  {t.get('name')}  ({t.get('duration', 0):.1f} s)")
            if i >= MAX_SHOWN:
                continue
            text = (t.get("stdout") or "") + (t.get("stderr") or "")
            for ln in text.rstrip("\n").split("\n")[-TAIL_LINES:]:
                print(f"      | {ln[:200]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
