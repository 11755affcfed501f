"""Counts test cases in Bazel's JUnit XML files and prints 'N passed, N failed, N skipped'.

gtest writes one <testcase> per case; a case with a <failure> or <error> child failed, one with <skipped>
(or gtest's result="skipped") was skipped. The pytest files run as their own main write no XML: Bazel's
generated file holds one case for the whole target, with pytest's output, whose summary line ("14 passed,
1 skipped in 0.5s") gives the cases instead. A test target that produced no XML case (crash before start)
counts as one failure so a broken binary can never look green.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET


_PYTEST_SUMMARY = re.compile(r"^=*\s*((?:\d+ (?:passed|failed|skipped|errors?|xfailed|xpassed|warnings?|deselected)"
                             r"(?:, )?)+) in [\d.]+s")


def pytest_counts(tree):
    """(passed, failed, skipped) from the pytest summary in a Bazel-generated XML's output, or None."""
    out = "".join(e.text or "" for e in tree.iter("system-out"))
    found = None
    for line in out.splitlines():
        m = _PYTEST_SUMMARY.match(line.strip())
        if m:
            found = m.group(1)
    if found is None:
        return None
    n = {k: int(v) for v, k in re.findall(r"(\d+) (\w+)", found)}
    return n.get("passed", 0) + n.get("xpassed", 0), n.get("failed", 0) + n.get("errors", 0) + n.get("error", 0), \
        n.get("skipped", 0) + n.get("xfailed", 0)


def main(root):
    passed = failed = skipped = 0
    for dirpath, dirs, files in os.walk(root, followlinks=True):
        # run_K_of_N/ hold --runs_per_test results of some earlier invocation, not of this one.
        dirs[:] = [d for d in dirs if not re.fullmatch(r"run_\d+_of_\d+", d)]
        if "test.xml" not in files:
            continue
        try:
            tree = ET.parse(os.path.join(dirpath, "test.xml"))
        except ET.ParseError:
            failed += 1
            continue
        cases = list(tree.iter("testcase"))
        from_pytest = pytest_counts(tree) if len(cases) == 1 else None
        if from_pytest is not None:
            p, f, s = from_pytest
            if f == 0 and (cases[0].find("failure") is not None or cases[0].find("error") is not None):
                f = 1  # the target failed after pytest's summary (its exit status)
            passed, failed, skipped = passed + p, failed + f, skipped + s
            continue
        real = [c for c in cases if c.get("status") != "notrun" or c.find("failure") is not None]
        if not real:
            suite = next(tree.iter("testsuite"), None)
            if suite is not None and int(suite.get("failures", 0) or 0) + int(suite.get("errors", 0) or 0):
                failed += 1
            continue
        for c in real:
            if c.find("failure") is not None or c.find("error") is not None:
                failed += 1
            elif c.find("skipped") is not None or c.get("result") == "skipped":
                skipped += 1
            else:
                passed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bazel-testlogs"))
