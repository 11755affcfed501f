#!/usr/bin/env bash
# tools/gpu_bundle.sh — builds a self-contained bundle of tessel's GPU test (and, once written, GPU
# benchmark) binaries plus one script that runs them on a GPU machine that has no Bazel and no Debian
# packages (the project's H200 session: nvcc, PyTorch and the CUDA wheels in a Python environment).
#
#   bash tools/gpu_bundle.sh [OUT_DIR]        # default OUT_DIR: gpu_bundle/ (git-ignored by name)
#   # on the GPU machine, from OUT_DIR:  bash run_gpu.sh      (< 8 minutes; exit 0 iff every test passed)
#
# What goes in: every cc_test tagged "cuda" but not "cuda_host" and every figure binary tagged
# "cuda_figure" (found by bazel query), built with --config=cuda and copied as runfiles-free binaries (they link tessel statically:
# linkstatic = True), cuda_probe, and in
# lib/ every shared library they load but glibc's and the driver's (libcudart from the toolkit, libstdc++,
# libgomp, oneDNN, OpenBLAS ... from this Debian), both folders gzipped into payload.tar.gz. NOT copied:
# libnccl.so.2 (208 MiB) and libcublasLt (517 MiB) would break the 64 MiB budget; run_gpu.sh takes them
# from the Python nvidia-* wheels (nvidia.nccl, nvidia.cu13) on that machine. The bundle fails to build if
# it exceeds 64 MiB.
# Requires the CUDA toolkit here (nvcc at $CUDA_PATH, default /usr/local/cuda).
#
# As a session with the device tool ran it (2026-12-04, nine calls of 39-71 s each on an H200):
#   run(command="set -o pipefail; cd gpu_bundle && TESSEL_GPU_PROFILE=1 TESSEL_GPU_LOG_DIR=$OUT \
#       TESSEL_GPU_SANITIZE_FAILURES=1 timeout 330 bash run_gpu.sh 2>&1 | tee $OUT/run_gpu.log",
#       carry=["gpu_bundle"])
# then give the machine back at once: it bills its 30 s of idle warmth too.
set -euo pipefail
ws="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$ws/gpu_bundle}"
cd "$ws"
cuda="${CUDA_PATH:-/usr/local/cuda}"
[ -x "$cuda/bin/nvcc" ] || { echo "gpu_bundle: no nvcc at $cuda/bin/nvcc; the bundle needs the CUDA toolkit" >&2; exit 1; }

# Tests tagged "cuda_host" (the coverage claims) link the CUDA libraries but need no GPU: they run where
# they are built, so they stay out of the bundle (its 64 MiB are for what only a GPU can check).
mapfile -t tests < <(bazel query 'attr(tags, "\bcuda\b", kind(cc_test, //...)) except attr(tags, "\bcuda_host\b", kind(cc_test, //...))' 2>/dev/null | sort)
[ "${#tests[@]}" -gt 0 ] || { echo "gpu_bundle: bazel query found no cuda-tagged tests" >&2; exit 1; }
mapfile -t figures < <(bazel query 'attr(tags, "\bcuda_figure\b", kind(cc_binary, //...))' 2>/dev/null | sort)
targets=("${tests[@]}" "${figures[@]}" //core/memory:cuda_probe)
echo "gpu_bundle: building ${#targets[@]} targets: ${targets[*]}" >&2
bazel build --config=cuda --jobs="${JOBS:-2}" "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in "${targets[@]}"; do
  pkg="${t#//}"; pkg="${pkg%%:*}"; name="${t##*:}"
  cp "bazel-bin/$pkg/$name" "$out/bin/$name"
  chmod u+w "$out/bin/$name"
  if ldd "$out/bin/$name" | grep -q '_solib_'; then
    echo "gpu_bundle: $t links Bazel-built shared libraries; set linkstatic = True on it" >&2
    exit 1
  fi
done
printf '%s\n' "${tests[@]##*:}" > "$out/tests.txt"
printf '%s\n' "${figures[@]##*:}" > "$out/figures.txt"
# Every shared library the binaries load, except glibc's own (the GPU machine's are newer), the driver's
# and the two CUDA libraries too large to carry (taken from the wheels there): libcudart, libstdc++,
# libgomp, oneDNN (libdnnl with its libOpenCL), OpenBLAS (with libgfortran, libquadmath). A machine
# without Debian's packages lacks all of them (seen: the first GPU run failed to load libdnnl.so.2).
skip_libs='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libcuda|libnccl|libcublasLt|libcublas)\.so'
for t in "${targets[@]}"; do ldd "$out/bin/${t##*:}"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r so path; do
    [[ "$so" =~ $skip_libs ]] || cp -L "$path" "$out/lib/$so"
  done
cp "$ws/tools/gpu_bundle_run.sh" "$out/run_gpu.sh"
# The PyTorch sides of gpu_gpt2_124m_mfu and gpu_attention_vs_torch_sdpa.
cp "$ws/benchmarks/pytorch/gpt2_124m_eager_cuda.py" "$ws/benchmarks/pytorch/sdpa_cuda.py" "$out/"
chmod +x "$out/run_gpu.sh"
{
  echo "tessel GPU bundle"
  echo "commit: $(git rev-parse HEAD)$(git diff --quiet || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -n), nvcc: $("$cuda/bin/nvcc" --version | tail -n 2 | head -n 1)"
  echo "gencode: sm_90a SASS + compute_90 PTX"
} > "$out/BUNDLE_INFO.txt"
# The binaries carry every kernel's sm_90a SASS and compute_90 PTX (~10 MiB each, 73 MiB together) and
# oneDNN and OpenBLAS are 40 and 36 MiB: bin/ and lib/ travel gzipped and run_gpu.sh unpacks them there.
tar -czf "$out/payload.tar.gz" -C "$out" bin lib
rm -rf "$out/bin" "$out/lib"
size_kib=$(du -sk "$out" | cut -f1)
echo "gpu_bundle: $out is $((size_kib / 1024)) MiB (${#tests[@]} tests, ${#figures[@]} figures)" >&2
[ "$size_kib" -lt $((64 * 1024)) ] || { echo "gpu_bundle: bundle over 64 MiB" >&2; exit 1; }
