#!/usr/bin/env python3
"""test-summary.py - after the stages of test.sh, name every test that did not
pass, with the last lines of its output.

CI keeps only the end of a run's output, so a failure in the first stage
(printed half an hour earlier) would otherwise be out of sight.

For each build directory: which tests ran and how they ended comes from
meson-logs/console.txt, meson test's own output as test.sh saved it (one
line per test: "N/M name RESULT 1.23s").  Their output comes from
meson-logs/testlog.json (one JSON object per test), when the test's object
can be read: meson writes that file from several tests at once, and a long
object can be cut by another one written into its middle (seen with a
240 KB conformance log), so objects are picked out wherever they start.

usage: test-summary.py BUILDDIR...
"""
import json
import os
import re
import sys

RESULT = re.compile(r"^\s*\d+/\d+\s+(\S.*?)\s+(OK|SKIP|FAIL|TIMEOUT|ERROR|EXPECTEDFAIL|UNEXPECTEDPASS|INTERRUPT)\s+\d")
PASSING = {"OK", "SKIP", "EXPECTEDFAIL"}
TAIL_LINES = 10   # of one failing test's output
FAIL_LINES = 6    # lines of it that say FAIL (a check, a conformance case) or a sanitizer's report
SAYS_FAIL = re.compile(r"FAIL|Sanitizer|Assertion|panic")
MAX_SHOWN = 6     # failing tests shown with their output, per build


def results(builddir):
    """(name, result) per test from the console log; None when absent."""
    try:
        with open(os.path.join(builddir, "meson-logs", "console.txt"), encoding="utf-8", errors="replace") as f:
            return [m.groups() for m in map(RESULT.match, f) if m]
    except OSError:
        return None


def outputs(builddir):
    """name -> stdout + stderr, for every object of testlog.json that parses."""
    try:
        with open(os.path.join(builddir, "meson-logs", "testlog.json"), encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    dec = json.JSONDecoder()
    out = {}
    for m in re.finditer(r'\{"name": "', text):
        try:
            t, _ = dec.raw_decode(text, m.start())
        except ValueError:
            continue
        if isinstance(t, dict) and "name" in t:
            out[t["name"]] = (t.get("stdout") or "") + (t.get("stderr") or "")
    return out


def main(argv):
    bad = 0
    for b in argv[1:]:
        res = results(b)
        if res is None:
            print(f"== {b}: no console log: its tests did not run")
            bad += 1
            continue
        if not res:
            print(f"== {b}: no test ran")
            bad += 1
            continue
        fails = [(n, r) for n, r in res if r not in PASSING]
        print(f"== {b}: {len(res)} tests, {len(fails)} not passed")
        texts = outputs(b) if fails else {}
        for i, (name, r) in enumerate(fails):
            bad += 1
            print(f"   {r}  {name}")
            if i >= MAX_SHOWN:
                continue
            text = texts.get(name)
            if text is None:
                print("      | (its output is not in testlog.json)")
                continue
            lines = text.rstrip("\n").split("\n")
            tail = lines[-TAIL_LINES:]
            said = [ln for ln in lines[:-TAIL_LINES] if SAYS_FAIL.search(ln)][:FAIL_LINES]
            for ln in said:
                print(f"      ! {ln[:200]}")
            for ln in tail:
                print(f"      | {ln[:200]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
