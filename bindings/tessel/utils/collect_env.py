"""tessel.utils.collect_env (torch.utils.collect_env): the environment report to paste into a bug report, with
torch's fields and layout plus tessel's own: its version, the BLAS and oneDNN its extension links (their
versions as the loaded libraries report them) and the CPU kernels it picked. Run as
`python -m tessel.utils.collect_env`, or get_env_info() (a SystemEnv namedtuple) / get_pretty_env_info()."""
import locale
import os
import re
import subprocess
import sys
from collections import namedtuple

TORCH_AVAILABLE = True  # tessel stands in for torch: its fields are filled from tessel

# torch's fields, in torch's order (a ported script reading env.torch_version or env.os works), then tessel's
SystemEnv = namedtuple("SystemEnv", [
    "torch_version", "is_debug_build", "cuda_compiled_version", "gcc_version", "clang_version", "cmake_version",
    "os", "libc_version", "python_version", "python_platform", "is_cuda_available", "cuda_runtime_version",
    "cuda_module_loading", "nvidia_driver_version", "nvidia_gpu_models", "cudnn_version", "is_xpu_available",
    "pip_version", "pip_packages", "conda_packages", "hip_compiled_version", "hip_runtime_version",
    "miopen_runtime_version", "caching_allocator_config", "is_xnnpack_available", "cpu_info",
    "rocm_compiled_version",
    "tessel_version", "blas_info", "onednn_info", "cpu_capability",
])

COMMON_PATTERNS = ["tessel", "torch", "numpy", "triton", "optree"]
PIP_PATTERNS = ["mypy", "flake8", "onnx"]
CONDA_PATTERNS = ["cudatoolkit", "soumith", "mkl", "magma"]


def run(command):
    """(return code, stdout, stderr) of a command (a string runs through the shell); a missing program is
    return code 127, as the shell reports it."""
    try:
        p = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             shell=isinstance(command, str),
                             env=dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1"))
    except OSError as e:
        return 127, "", str(e)
    out, err = p.communicate()
    encoding = locale.getpreferredencoding()
    return p.returncode, out.decode(encoding, "replace").strip(), err.decode(encoding, "replace").strip()


def run_and_read_all(run_lambda, command):
    rc, out, _ = run_lambda(command)
    return out if rc == 0 else None


def run_and_parse_first_match(run_lambda, command, regex):
    rc, out, _ = run_lambda(command)
    if rc != 0:
        return None
    match = re.search(regex, out)
    return match.group(1) if match else None


def run_and_return_first_line(run_lambda, command):
    rc, out, _ = run_lambda(command)
    return out.split("\n")[0] if rc == 0 else None


def get_platform():
    for name in ("linux", "win32", "cygwin", "darwin"):
        if sys.platform.startswith(name):
            return name
    return sys.platform


def get_conda_packages(run_lambda, patterns=None):
    patterns = patterns or CONDA_PATTERNS + COMMON_PATTERNS
    out = run_and_read_all(run_lambda, "%s list" % os.environ.get("CONDA_EXE", "conda"))
    if out is None:
        return None
    return "\n".join(line for line in out.splitlines()
                     if not line.startswith("#") and any(p in line for p in patterns))


def get_pip_packages(run_lambda, patterns=None):
    """("pip3", the matching lines of `python -m pip list --format=freeze`)."""
    patterns = patterns or PIP_PATTERNS + COMMON_PATTERNS
    out = run_and_read_all(run_lambda, [sys.executable, "-mpip", "list", "--format=freeze"])
    if out is None:
        return "pip3", None
    return "pip3", "\n".join(line for line in out.splitlines() if any(p in line for p in patterns))


def get_gcc_version(run_lambda):
    return run_and_parse_first_match(run_lambda, "gcc --version", r"gcc (.*)")


def get_clang_version(run_lambda):
    return run_and_parse_first_match(run_lambda, "clang --version", r"clang version (.*)")


def get_cmake_version(run_lambda):
    return run_and_parse_first_match(run_lambda, "cmake --version", r"cmake (.*)")


def get_nvidia_smi():
    return "nvidia-smi"


def get_nvidia_driver_version(run_lambda):
    return run_and_parse_first_match(run_lambda, get_nvidia_smi(), r"Driver Version: (.*?) ")


def get_gpu_info(run_lambda):
    rc, out, _ = run_lambda(get_nvidia_smi() + " -L")
    return re.sub(r" \(UUID: .+?\)", "", out) if rc == 0 else None  # GPUs listed without their UUIDs


def get_running_cuda_version(run_lambda):
    return run_and_parse_first_match(run_lambda, "nvcc --version", r"release .+ V(.*)")


def get_cudnn_version(run_lambda):
    """The libcudnn files ldconfig knows (which one a program would load is not knowable from here)."""
    rc, out, _ = run_lambda('ldconfig -p | grep libcudnn | rev | cut -d" " -f1 | rev')
    if not out or rc not in (0, 1):
        named = os.environ.get("CUDNN_LIBRARY")
        return os.path.realpath(named) if named and os.path.isfile(named) else None
    files = sorted({os.path.realpath(f) for f in out.split("\n") if os.path.isfile(os.path.realpath(f))})
    if not files:
        return None
    return files[0] if len(files) == 1 else "Probably one of the following:\n" + "\n".join(files)


def get_cpu_info(run_lambda):
    """lscpu's report; without lscpu, /proc/cpuinfo's model, count and flags in lscpu's wording."""
    if get_platform() == "darwin":
        rc, out, err = run_lambda("sysctl -n machdep.cpu.brand_string")
        return out if rc == 0 else err
    rc, out, err = run_lambda("lscpu")
    if rc == 0:
        return out
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return err or "None"
    import platform
    fields = dict(re.findall(r"^(model name|flags)\s*:\s*(.*)$", text, re.M))
    lines = ["Architecture: %s" % platform.machine(),
             "CPU(s): %d" % len(re.findall(r"^processor\s*:", text, re.M)),
             "Model name: %s" % fields.get("model name", "unknown")]
    if "flags" in fields:
        lines.append("Flags: %s" % fields["flags"])
    return "\n".join(lines)


def get_os(run_lambda):
    from platform import machine
    platform = get_platform()
    if platform == "darwin":
        version = run_and_parse_first_match(run_lambda, "sw_vers -productVersion", r"(.*)")
        return None if version is None else "macOS %s (%s)" % (version, machine())
    if platform != "linux":
        return platform
    desc = (run_and_parse_first_match(run_lambda, "lsb_release -a", r"Description:\t(.*)")
            or run_and_parse_first_match(run_lambda, "cat /etc/*-release", r'PRETTY_NAME="(.*)"'))
    return "%s (%s)" % (desc or platform, machine())


def get_python_platform():
    import platform
    return platform.platform()


def get_libc_version():
    import platform
    return "-".join(platform.libc_ver()) if get_platform() == "linux" else "N/A"


def get_cachingallocator_config():
    names = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
    return {name: os.environ[name] for name in names if os.environ.get(name)}


def get_tessel_libraries():
    """(BLAS, oneDNN, CPU capability) lines for tessel's section of the report, None where not found."""
    import tessel
    from tessel import _build_info
    linked = _build_info.linked_libraries()
    blas, dnnl = _build_info.openblas(), _build_info.onednn()
    blas_line = None if blas is None else "%s (%s)" % (blas[0], linked.get("openblas"))
    dnnl_line = None if dnnl is None else "%s (Git Hash %s, %s runtime) (%s)" % (dnnl + (linked.get("dnnl"),))
    return blas_line, dnnl_line, tessel.backends.cpu.get_cpu_capability()


def get_env_info():
    """The environment as a SystemEnv: torch's fields (tessel's Python face has no CUDA, ROCm or XPU build, so
    those read None / "N/A", while the machine's own nvidia-smi / nvcc / cuDNN answers are still asked) and
    tessel_version, blas_info, onednn_info, cpu_capability."""
    import tessel
    run_lambda = run
    pip_version, pip_list = get_pip_packages(run_lambda)
    blas, dnnl, capability = get_tessel_libraries()
    return SystemEnv(
        torch_version=tessel.__version__,
        is_debug_build=str(tessel.version.debug),
        cuda_compiled_version=tessel.version.cuda,
        gcc_version=get_gcc_version(run_lambda),
        clang_version=get_clang_version(run_lambda),
        cmake_version=get_cmake_version(run_lambda),
        os=get_os(run_lambda),
        libc_version=get_libc_version(),
        python_version="%s (%d-bit runtime)" % (sys.version.replace("\n", " "), sys.maxsize.bit_length() + 1),
        python_platform=get_python_platform(),
        is_cuda_available=str(tessel.cuda.is_available()),
        cuda_runtime_version=get_running_cuda_version(run_lambda),
        cuda_module_loading="N/A",
        nvidia_driver_version=get_nvidia_driver_version(run_lambda),
        nvidia_gpu_models=get_gpu_info(run_lambda),
        cudnn_version=get_cudnn_version(run_lambda),
        is_xpu_available=str(tessel.xpu.is_available()),
        pip_version=pip_version,
        pip_packages=pip_list,
        conda_packages=get_conda_packages(run_lambda),
        hip_compiled_version="N/A",
        hip_runtime_version="N/A",
        miopen_runtime_version="N/A",
        caching_allocator_config=get_cachingallocator_config(),
        is_xnnpack_available="False",  # tessel has no XNNPACK kernels
        cpu_info=get_cpu_info(run_lambda),
        rocm_compiled_version="N/A",
        tessel_version=tessel.version.tessel,
        blas_info=blas,
        onednn_info=dnnl,
        cpu_capability=capability,
    )


env_info_fmt = """
tessel version: {tessel_version}
PyTorch version: {torch_version}
Is debug build: {is_debug_build}
CUDA used to build PyTorch: {cuda_compiled_version}
ROCm SDK used to build PyTorch: {rocm_compiled_version}
HIP used to build PyTorch: {hip_compiled_version}

OS: {os}
GCC version: {gcc_version}
Clang version: {clang_version}
CMake version: {cmake_version}
Libc version: {libc_version}

Python version: {python_version}
Python platform: {python_platform}
Is CUDA available: {is_cuda_available}
CUDA runtime version: {cuda_runtime_version}
CUDA_MODULE_LOADING set to: {cuda_module_loading}
GPU models and configuration: {nvidia_gpu_models}
Nvidia driver version: {nvidia_driver_version}
cuDNN version: {cudnn_version}
Is XPU available: {is_xpu_available}
HIP runtime version: {hip_runtime_version}
MIOpen runtime version: {miopen_runtime_version}
Is XNNPACK available: {is_xnnpack_available}
Caching allocator config: {caching_allocator_config}

CPU:
{cpu_info}

tessel's libraries:
BLAS: {blas_info}
oneDNN: {onednn_info}
CPU capability: {cpu_capability}

Versions of relevant libraries:
{pip_packages}
{conda_packages}
""".strip()


def pretty_str(envinfo):
    """envinfo in env_info_fmt's layout, with torch's substitutions: "No CUDA" for the CUDA fields when no GPU
    answered, Yes / No for booleans, "Could not collect" for None, "No relevant packages" for an empty list,
    and package lines tagged [pip3] / [conda]."""
    import tessel
    d = envinfo._asdict()
    gpus = envinfo.nvidia_gpu_models
    if gpus is not None and len(gpus.split("\n")) > 1:
        d["nvidia_gpu_models"] = "\n%s\n" % gpus
    dynamic = ("cuda_runtime_version", "nvidia_gpu_models", "nvidia_driver_version")
    if not tessel.cuda.is_available() and all(d[k] is None for k in dynamic):
        for k in dynamic + ("cudnn_version",):
            d[k] = "No CUDA"
        if envinfo.cuda_compiled_version is None:
            d["cuda_compiled_version"] = "None"
    for k, v in d.items():
        d[k] = "Yes" if v is True else "No" if v is False else "Could not collect" if v is None else v
    for k, tag in (("pip_packages", "[%s] " % envinfo.pip_version), ("conda_packages", "[conda] ")):
        if d[k] == "":
            d[k] = "No relevant packages"
        if d[k]:
            d[k] = "\n".join(tag + line for line in d[k].split("\n"))
    d["cpu_info"] = envinfo.cpu_info
    d["caching_allocator_config"] = envinfo.caching_allocator_config or "N/A"
    return env_info_fmt.format(**d)


def get_pretty_env_info():
    return pretty_str(get_env_info())


def main():
    print("Collecting environment information...")
    print(get_pretty_env_info())


if __name__ == "__main__":
    main()
