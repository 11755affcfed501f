"""The main of the pytest files listed in bindings/BUILD.bazel: runs pytest on the file given as its argument, so a
test file's cases run whether or not it ends with its own `pytest.main` call (four files that lacked one passed
without running a case, their wrong expectations unseen)."""
import sys

import pytest

if __name__ == "__main__":
    if len(sys.argv) != 2 or not sys.argv[1].endswith("_test.py"):
        raise SystemExit("usage: pytest_main.py bindings/tests/<name>_test.py")
    sys.exit(pytest.main([sys.argv[1], "-q", "-p", "no:cacheprovider"]))
