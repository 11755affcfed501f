#!/usr/bin/env python3
"""tools/dev/torch_differential/compare.py — developer tool: runs values.py, gradients.py and modules.py under tessel and
under PyTorch and prints every line where the outputs differ (an "ERR <type>" on one side is a missing or
failing function; a different number is a silent divergence). Never part of CI (PyTorch is not installed there);
what it finds becomes a test with PyTorch's output written into it (bindings/tests/composed_functions_test.py,
indexing_rng_testing_test.py).

Needs tessel's Python package (PYTHONPATH as for bindings tests, e.g. a bazel-bin/bindings/<test>.runfiles/tessel/
bindings) and PyTorch from tools/dev/install_torch.sh (TESSEL_TORCH_PYTHON).

Usage: TESSEL_TORCH_PYTHON=~/.cache/tessel/torch/python python3 tools/dev/torch_differential/compare.py
"""
import difflib
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(python, script, module):
    out = subprocess.run([python, os.path.join(HERE, script), module], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit("%s %s under %s failed:\n%s" % (script, module, python, out.stderr[-2000:]))
    return out.stdout.splitlines()


def main():
    torch_python = os.environ.get("TESSEL_TORCH_PYTHON")
    if not torch_python:
        sys.exit("set TESSEL_TORCH_PYTHON (bash tools/dev/install_torch.sh prints it)")
    differences = 0
    for script in ("values.py", "gradients.py", "modules.py"):
        ours, theirs = run(sys.executable, script, "tessel"), run(torch_python, script, "torch")
        for line in difflib.unified_diff(theirs, ours, "torch", "tessel", n=0, lineterm=""):
            if not line.startswith(("---", "+++", "@@")):
                print(script, line)
                differences += line.startswith("+")
    print("%d differing lines" % differences)


if __name__ == "__main__":
    main()
