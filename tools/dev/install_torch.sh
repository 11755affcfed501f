#!/usr/bin/env bash
# tools/dev/install_torch.sh — developer tool: installs PyTorch from PyPI into a private directory for the
# `gpt_step_vs_pytorch` and `gemm_vs_peak` comparisons of //benchmarks:report. Never part of the product,
# of tools/setup.sh or of CI.
#
# It installs the torch wheel with --no-deps (PyPI's Linux wheel otherwise pulls the whole CUDA stack,
# gigabytes a CPU comparison never uses) plus the pure-Python packages `import torch` needs, into
# $TORCH_DIR (default ~/.cache/tessel/torch), then checks that torch imports and multiplies on the CPU.
# libtorch_cuda.so is linked against every CUDA library, so `import torch` loads them even on a CPU:
# the CUDA toolkit that tools/setup.sh's machines carry in /usr/local/cuda covers most; the three it
# lacks or has in an older version (cuFile, cuSPARSELt, NVSHMEM, NCCL; ~500 MB) come from their PyPI
# wheels, again without deps, where the wheel's RPATH finds them first.
# Finally it prints the TESSEL_TORCH_PYTHON line to export: a tiny wrapper that runs /usr/bin/python3
# with that directory on PYTHONPATH.
#
# Usage: bash tools/dev/install_torch.sh [--version=2.15.0]
#        export TESSEL_TORCH_PYTHON=~/.cache/tessel/torch/python
#        bazel run //benchmarks:report -- --filter=pytorch
set -euo pipefail
version=2.15.0
for arg in "$@"; do
  case "$arg" in
    --version=*) version="${arg#--version=}" ;;
    *) echo "usage: $0 [--version=X.Y.Z]" >&2; exit 2 ;;
  esac
done
dir="${TORCH_DIR:-${HOME:-/root}/.cache/tessel/torch}"
site="$dir/site"
py=/usr/bin/python3
pip=("$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --target "$site")
if ! PYTHONPATH="$site" "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  echo "install_torch: torch==$version (without its CUDA dependency tree) into $site" >&2
  mkdir -p "$site"
  "${pip[@]}" --no-deps --upgrade "torch==$version"
  # The pure-Python requirements of the wheel (its METADATA, less the CUDA/triton packages).
  "${pip[@]}" --upgrade filelock "typing-extensions>=4.13.0" "sympy>=1.13.3" mpmath "networkx>=2.5.1" jinja2 \
    markupsafe "fsspec>=0.8.5" numpy
  "${pip[@]}" --no-deps --upgrade "nvidia-cufile==1.17.1.22.*" "nvidia-cusparselt-cu13==0.8.1" \
    "nvidia-nvshmem-cu13==3.7.2" "nvidia-nccl-cu13==2.30.7"
fi
cat > "$dir/python" <<WRAP
#!/usr/bin/env bash
# Written by tools/dev/install_torch.sh: /usr/bin/python3 with the private PyTorch on its path.
export PYTHONPATH="$site\${PYTHONPATH:+:\$PYTHONPATH}"
exec $py "\$@"
WRAP
chmod +x "$dir/python"
"$dir/python" -c "
import torch
x = torch.ones(64, 64)
assert float((x @ x).sum()) == 64 ** 3, 'torch matmul gave a wrong sum'
print('install_torch: torch', torch.__version__, 'imports and multiplies on the CPU;', torch.backends.mkldnn.is_available() and 'oneDNN on' or 'oneDNN off')
"
echo "export TESSEL_TORCH_PYTHON=$dir/python"
