#!/bin/bash
# The @cuda repository's decision matches the machine: "available" means nvcc is there and compiles a
# kernel for sm_90a + compute_90; "absent" names a reason consistent with the filesystem.
set -u
config="$1"
cat "$config"
available=$(sed -n 's/^available=//p' "$config")
path=$(sed -n 's/^path=//p' "$config")
reason=$(sed -n 's/^reason=//p' "$config")
fail() { echo "FAIL: $*"; exit 1; }
if [ "$available" = 1 ]; then
  [ -x "$path/bin/nvcc" ] || fail "config says available but $path/bin/nvcc is missing"
  tmp="${TEST_TMPDIR:-/tmp}"
  printf '__global__ void k(float* x) { x[threadIdx.x] += 1.f; }\n' > "$tmp/k.cu"
  "$path/bin/nvcc" -ccbin /usr/bin/g++ -c -gencode arch=compute_90a,code=sm_90a \
    -gencode arch=compute_90,code=compute_90 -o "$tmp/k.o" "$tmp/k.cu" || fail "nvcc cannot compile for sm_90a"
  echo "CUDA toolkit used: CUDA targets are built (their tests skip at run time without a GPU)"
else
  case "$reason" in
    "disabled by TESSEL_CUDA=0") ;;
    "no nvcc at "*) [ ! -e "$path/bin/nvcc" ] || fail "config says no nvcc but $path/bin/nvcc exists" ;;
    *) fail "unexpected reason '$reason'" ;;
  esac
  echo "CUDA toolkit not used ($reason): every CUDA target is skipped (see the test summary's skipped count)"
fi
echo PASS
