#!/usr/bin/env bash
# tools/test.sh — the README's "run every test" command: setup, build, run all tests, then print
# one plain line "N passed, N failed" (gtest cases + pytest cases, read from the JUnit XML files).
set -uo pipefail
ws="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ws"
bash tools/setup.sh || { echo "setup failed"; exit 1; }
jobs="${TESSEL_JOBS:-$(nproc)}"
bazel test --jobs="$jobs" --local_test_jobs=1 --test_tag_filters=-manual "${@:-//...}"
rc=$?
/usr/bin/python3 tools/count_tests.py "$ws/bazel-testlogs" || rc=1
bazel shutdown >/dev/null 2>&1 || true
exit $rc
