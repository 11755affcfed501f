"""Counts test cases in Bazel's JUnit XML files and prints 'N passed, N failed, N skipped'.

gtest and pytest both write one <testcase> per case; a case with a <failure> or <error> child failed,
one with <skipped> (or gtest's result="skipped") was skipped. A test target that produced no XML case
(crash before start) counts as one failure so a broken binary can never look green.
"""
import os
import re
import sys
import xml.etree.ElementTree as ET


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
