#!/usr/bin/env bash
# tools/fuzz.sh — builds the libFuzzer targets with clang (ASan + UBSan) and runs each on its seed
# corpus for a short time; any crash, sanitizer report or unexpected error code fails the script.
#
#   bash tools/fuzz.sh              # 20 s per target (the CI run)
#   FUZZ_SECONDS=600 bash tools/fuzz.sh safetensors_header    # one target, longer
#
# Targets (source, seed corpus): tensor_factory (core/tensor/fuzz), metadata and safetensors_header
# (checkpoint/fuzz). Needs clang-14 and libclang-rt-14-dev (Debian); setup.sh does not install them,
# this script does when they are missing. Outside Bazel on purpose: the Bazel toolchain is gcc, and
# libFuzzer needs clang's runtime. Findings land in $OUT (default /tmp/tessel-fuzz/<target>).
set -euo pipefail
ws="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ws"
for p in clang-14 libclang-rt-14-dev libxxhash-dev nlohmann-json3-dev; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null
  fi
done
seconds="${FUZZ_SECONDS:-20}"
out_root="${OUT:-/tmp/tessel-fuzz}"
cxx="clang++-14 -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined"
cxx="$cxx -fno-sanitize-recover=undefined -fopenmp=libgomp -I$ws -I/usr/include/eigen3"
core_srcs="core/base/error.cc core/base/parallel.cc core/memory/allocator.cc core/tensor/device.cc
  core/tensor/copy.cc core/tensor/dtype.cc core/tensor/factory.cc core/tensor/random.cc core/tensor/shape.cc
  core/tensor/storage.cc core/tensor/tensor.cc"
ckpt_srcs="checkpoint/box.cc checkpoint/checksum.cc checkpoint/storage.cc"
declare -A src=(
  [tensor_factory]="core/tensor/fuzz/tensor_factory_fuzzer.cc"
  [metadata]="checkpoint/fuzz/metadata_fuzzer.cc checkpoint/metadata.cc $ckpt_srcs"
  [safetensors_header]="checkpoint/fuzz/safetensors_header_fuzzer.cc checkpoint/safetensors.cc $ckpt_srcs"
)
declare -A corpus=(
  [tensor_factory]=core/tensor/fuzz/corpus
  [metadata]=checkpoint/fuzz/corpus/metadata
  [safetensors_header]=checkpoint/fuzz/corpus/safetensors_header
)
targets=("${@:-tensor_factory metadata safetensors_header}")
read -r -a targets <<<"${targets[*]}"
export ASAN_OPTIONS="allocator_may_return_null=1:detect_leaks=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for t in "${targets[@]}"; do
  dir="$out_root/$t"
  mkdir -p "$dir/corpus"
  echo "fuzz: building $t" >&2
  # shellcheck disable=SC2086
  $cxx -o "$dir/fuzzer" ${src[$t]} $core_srcs -lxxhash -lpthread
  cp -n "${corpus[$t]}"/* "$dir/corpus/" 2>/dev/null || true
  echo "fuzz: running $t for ${seconds}s (corpus ${corpus[$t]}, findings in $dir)" >&2
  "$dir/fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=4096 \
    -artifact_prefix="$dir/" -print_final_stats=1 "$dir/corpus" "${corpus[$t]}" 2>"$dir/log.txt" ||
    { tail -40 "$dir/log.txt"; echo "fuzz: $t FAILED (reproduce: $dir/fuzzer <artifact>)" >&2; exit 1; }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$dir/log.txt" | sed "s/^/fuzz: $t /" >&2
done
echo "fuzz: all targets passed" >&2
