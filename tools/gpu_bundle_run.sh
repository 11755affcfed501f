#!/usr/bin/env bash
# run_gpu.sh (copied into the bundle by tools/gpu_bundle.sh) — runs every tessel GPU test of the
# bundle, then the GPU figures, on a machine with a GPU, a CUDA 13-capable driver and Python with the
# nvidia-nccl / nvidia-cublas wheels (where libnccl.so.2 and libcublasLt come from). Under 8 minutes:
# each test has a 120 s limit and the tests a 240 s budget (tests not started by then are reported as
# NOT RUN); a figure starts only before 330 s and takes at most 120 s (60 s for its binary, 60 s for its
# PyTorch side where it has one), so the run ends by 450 s. Prints one line per test (PASS /
# FAIL / SKIP / NOT RUN), one per figure (its result, or exactly what is missing for it) and a summary;
# exit 0 iff every test passed (a skip counts as a failure here: this script exists to run on a GPU).
#
# Knobs for a rerun inside a short lease: TESSEL_GPU_TESTS="a b" runs only those tests (default: every
# test in tests.txt), TESSEL_GPU_FIGURES="x" only those figures ("none" for none), TESSEL_GPU_TEST_BUDGET_S
# and TESSEL_GPU_TOTAL_BUDGET_S replace the 240 s and 330 s, and TESSEL_GPU_LOG_DIR (a folder) receives
# every test's whole log in tests.log (the console shows the last 40 lines of a failure only) and, with
# TESSEL_GPU_SANITIZE_FAILURES=1, each failing test rerun under compute-sanitizer in sanitizer.log.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
start=$(date +%s)
budget="${TESSEL_GPU_TEST_BUDGET_S:-240}"
total_budget="${TESSEL_GPU_TOTAL_BUDGET_S:-330}"
py="${PYTHON:-python3}"
logdir="${TESSEL_GPU_LOG_DIR:-}"
[ -z "$logdir" ] || mkdir -p "$logdir"
selected_tests="${TESSEL_GPU_TESTS:-$(tr '\n' ' ' < "$here/tests.txt")}"
selected_figures="${TESSEL_GPU_FIGURES:-$(tr '\n' ' ' < "$here/figures.txt")}"

# The binaries and libraries travel gzipped (tools/gpu_bundle.sh); unpack them once.
if [ -f "$here/payload.tar.gz" ] && [ ! -d "$here/bin" ]; then
  tar -xzf "$here/payload.tar.gz" -C "$here" || { echo "run_gpu: could not unpack payload.tar.gz" >&2; exit 1; }
fi

# Shared libraries from the Python CUDA wheels (namespace packages: nvidia.nccl, nvidia.cublas, ...).
wheel_libs="$("$py" - <<'EOF' 2>/dev/null
import importlib, os
dirs = []
for mod in ("nvidia.nccl", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.cu13", "nvidia.cu12"):
    try:
        m = importlib.import_module(mod)
    except Exception:
        continue
    for p in getattr(m, "__path__", []):
        for sub in ("lib", "lib64"):
            d = os.path.join(p, sub)
            if os.path.isdir(d):
                dirs.append(d)
print(":".join(dirs))
EOF
)"
libpath="$here/lib${wheel_libs:+:$wheel_libs}"
echo "run_gpu: $(head -n 2 "$here/BUNDLE_INFO.txt" | tr '\n' ' ')"
echo "run_gpu: $(nvidia-smi -L 2>&1 | head -n 4 | tr '\n' ' ')"
echo "run_gpu: python $("$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -n 1)"
echo "run_gpu: wheel library dirs: ${wheel_libs:-none found}"
for so in libnccl.so.2 libcublasLt.so.13; do
  found=""
  IFS=: read -ra dirs <<< "$libpath"
  for d in "${dirs[@]}"; do [ -e "$d/$so" ] && found="$d/$so"; done
  echo "run_gpu: $so: ${found:-MISSING (tests that need it will fail to load)}"
done
# Only tessel's binaries get the bundled libstdc++/libcudart first on the path (not python/torch).
run_bin() { LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" timeout "$1" "${@:2}"; }

run_bin 30 "$here/bin/cuda_probe" || echo "run_gpu: cuda_probe found no usable GPU (see its line above)"

pass=0; fail=0; skip=0; notrun=0
# TESSEL_EXPECT_GPUS: the device count the tests must see (nvidia-smi's), so a test can tell "no GPU
# here" (skip) from "the GPU is here and the runtime did not find it" (failure).
export TESSEL_EXPECT_GPUS="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
for t in $selected_tests; do
  if [ $(( $(date +%s) - start )) -ge $budget ]; then echo "NOT RUN  $t (time budget)"; notrun=$((notrun + 1)); continue; fi
  log="$(mktemp)"
  run_bin 120 "$here/bin/$t" --gtest_brief=0 >"$log" 2>&1
  rc=$?
  [ -z "$logdir" ] || { echo "===== $t (exit $rc)"; cat "$log"; } >> "$logdir/tests.log"
  if [ $rc -ne 0 ]; then
    echo "FAIL     $t (exit $rc)"; tail -n 40 "$log" | sed 's/^/    /'; fail=$((fail + 1))
    # A failure's second look, into the log folder: the same binary under compute-sanitizer's memcheck.
    if [ -n "$logdir" ] && [ -n "${TESSEL_GPU_SANITIZE_FAILURES:-}" ] && command -v compute-sanitizer >/dev/null &&
       [ $(( $(date +%s) - start )) -lt $budget ]; then
      { echo "===== compute-sanitizer --tool memcheck $t"
        run_bin 60 compute-sanitizer --tool memcheck --print-limit 20 "$here/bin/$t" 2>&1 | tail -n 300
      } >> "$logdir/sanitizer.log"
    fi
  elif grep -q '\[  SKIPPED \]' "$log"; then
    echo "SKIP     $t: $(grep -m1 -A1 'Skipped' "$log" | tail -n 1)"; skip=$((skip + 1))
  else
    echo "PASS     $t ($(grep -c '\[       OK \]' "$log") cases)"; pass=$((pass + 1))
  fi
  rm -f "$log"
done

# Figures (docs/PERFORMANCE.md rows): a binary in bin/ when its pieces exist, else what is missing.
missing_gpu_gemm_bf16_vs_cublas="benchmarks:gpu_gemm_bf16_vs_cublas not built into this bundle"
missing_gpu_attention_vs_torch_sdpa="benchmarks:gpu_attention_vs_torch_sdpa not built into this bundle"
missing_gpu_gpt2_124m_mfu="benchmarks:gpu_gpt2_124m_mfu not built into this bundle"
# Runs a figure's PyTorch side ($2) and prints figure $3 = awk expression $6 of tessel's value (line $4 of
# $1) as `a` and PyTorch's (line $5) as `b`; $7 describes it.
pytorch_side() {
  local plog ours theirs
  plog="$(mktemp)"
  timeout 60 "$py" "$here/$2" >"$plog" 2>&1 || echo "pytorch side $2: FAILED (exit $?)"
  cat "$plog"
  ours=$(awk -v k="$4" '$1 == k {print $2}' "$1")
  theirs=$(awk -v k="$5" '$1 == k {print $2}' "$plog")
  if [ -n "$ours" ] && [ -n "$theirs" ]; then
    awk -v a="$ours" -v b="$theirs" -v name="$3" -v what="$7" "BEGIN { printf \"figure %s %.3f (%s)\\n\", name, $6, what }"
  fi
  rm -f "$plog"
}

for fig in gpu_gemm_bf16_vs_cublas gpu_attention_vs_torch_sdpa gpu_gpt2_124m_mfu; do
  case " $selected_figures " in *" $fig "*) ;; *) echo "figure $fig: not selected"; continue ;; esac
  if [ ! -x "$here/bin/$fig" ]; then
    var="missing_$fig"
    echo "figure $fig: NOT IN THIS BUNDLE: ${!var}"
    continue
  fi
  if [ $(( $(date +%s) - start )) -ge $total_budget ]; then echo "figure $fig: NOT RUN (time budget)"; continue; fi
  flog="$(mktemp)"
  run_bin 60 "$here/bin/$fig" >"$flog" 2>&1 || echo "figure $fig: FAILED (exit $?)"
  cat "$flog"
  case "$fig" in
    gpu_attention_vs_torch_sdpa)
      pytorch_side "$flog" sdpa_cuda.py gpu_attention_vs_torch_sdpa tessel_attention_fwd_bwd_ms \
        pytorch_sdpa_fwd_bwd_ms "b / a" "SDPA ms / tessel ms, fwd+bwd; target >= 0.8" ;;
    gpu_gpt2_124m_mfu)
      pytorch_side "$flog" gpt2_124m_eager_cuda.py gpu_gpt2_124m_vs_pytorch_eager tessel_gpt2_124m_tokens_per_s \
        pytorch_gpt2_124m_tokens_per_s "a / b" "tessel / PyTorch eager tokens/s; target > 1" ;;
  esac
  rm -f "$flog"
done

echo "run_gpu: $pass passed, $fail failed, $skip skipped, $notrun not run, $(( $(date +%s) - start )) s"
[ $fail -eq 0 ] && [ $skip -eq 0 ] && [ $notrun -eq 0 ]
