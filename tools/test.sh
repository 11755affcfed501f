#!/usr/bin/env bash
# tools/test.sh — the README's "run every test" command: setup, build, run all tests, then print
# one plain line "N passed, N failed" (gtest cases from the JUnit XML files, pytest cases from the summary line in their output).
set -uo pipefail
ws="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ws"
bash tools/setup.sh || { echo "setup failed"; exit 1; }
jobs="${TESSEL_JOBS:-$(nproc)}"
bazel test --jobs="$jobs" --local_test_jobs=1 --test_tag_filters=-manual "${@:-//...}"
rc=$?
/usr/bin/python3 tools/count_tests.py "$ws/bazel-testlogs" || rc=1
# CUDA is optional (third_party/cuda/configure.bzl): say whether GPU tests were built or compiled out.
cuda_cfg="$(bazel info output_base 2>/dev/null)/external/cuda/config.txt"
if [ -f "$cuda_cfg" ]; then
  ncuda=$(bazel query 'attr(tags, "\bcuda\b", tests(//...))' 2>/dev/null | wc -l)
  if grep -q '^available=1' "$cuda_cfg"; then
    echo "CUDA toolkit used: $ncuda GPU test targets built (their cases skip without a GPU)"
  else
    echo "CUDA $(sed -n 's/^reason=//p' "$cuda_cfg"): $ncuda GPU test targets compiled out (bazel lists them SKIPPED)"
  fi
fi
bazel shutdown >/dev/null 2>&1 || true
exit $rc
