"""torch.__config__: show() describes the build (compiler, C++ standard, the BLAS / oneDNN / OpenMP libraries,
the CPU kernels in use, "Build settings: KEY=value, ..."), parallel_info() the thread budgets and the libraries'
own thread counts, _cxx_flags() the C++ flags; each in torch's layout, with tessel's libraries in place of
torch's MKL. Loaded on first use of tessel.__config__."""
import os

from . import _build_info

__all__ = ["show", "parallel_info"]


def _blas_line():
    blas = _build_info.openblas()
    return None if blas is None else blas[0]


def _onednn_line():
    dnnl = _build_info.onednn()
    return None if dnnl is None else "oneDNN %s (Git Hash %s)" % dnnl[:2]


def _build_settings():
    from . import version
    compiler = _build_info.compiler()
    linked = _build_info.linked_libraries()
    settings = {
        "BLAS_INFO": "open" if _build_info.openblas() else "none",
        "BUILD_TYPE": "Debug" if _build_info.has_debug_info() else "Release",
        "CXX_COMPILER": compiler[0].lower() if compiler else "unknown",
        "CXX_FLAGS": " " + _build_info.CXX_FLAGS,  # torch's value starts with a space too
        "TESSEL_VERSION": version.tessel,
        "TORCH_VERSION": version.__version__.split("+")[0],
        "USE_CUDA": "0" if version.cuda is None else "1",
        "USE_GLOO": "ON" if "gloo" in linked else "OFF",
        "USE_MKL": "OFF",
        "USE_MKLDNN": "ON" if _build_info.onednn() else "OFF",
        "USE_OPENMP": "ON" if _build_info.omp_max_threads() is not None else "OFF",
    }
    return "".join("%s=%s, " % item for item in sorted(settings.items()))


def show():
    """The build's description, as torch.__config__.show() lays it out ("tessel built with:" and a list)."""
    from . import backends
    compiler = _build_info.compiler()
    lines = ["tessel built with:"]
    if compiler:
        lines.append("  - %s %s" % (compiler[0], ".".join(compiler[1].split(".")[:2])))
    lines.append("  - C++ Version: %d" % _build_info.CXX_STANDARD)
    for line in (_blas_line(), _onednn_line()):
        if line:
            lines.append("  - " + line)
    if _build_info.omp_max_threads() is not None:
        lines.append("  - OpenMP (libgomp)")
    lines.append("  - CPU capability usage: %s" % backends.cpu.get_cpu_capability())
    lines.append("  - Build settings: " + _build_settings())
    return "\n".join(lines) + "\n"


def _cxx_flags():
    """The C++ flags the extension is built with (the release build's)."""
    return " " + _build_info.CXX_FLAGS


def parallel_info():
    """Thread settings, as torch.__config__.parallel_info() lays them out: tessel's intra-op and inter-op
    budgets for the calling thread, then what OpenMP, OpenBLAS and oneDNN report, the CPUs and the
    environment variables those libraries read."""
    import tessel
    lines = ["tessel/Parallel:",
             "\ttessel.get_num_threads() : %d" % tessel.get_num_threads(),
             "\ttessel.get_num_interop_threads() : %d" % tessel.get_num_interop_threads()]
    omp = _build_info.omp_max_threads()
    if omp is not None:
        lines += ["OpenMP (libgomp)", "\tomp_get_max_threads() : %d" % omp]
    blas = _build_info.openblas()
    if blas is not None:
        # tessel runs OpenBLAS on one thread per call and parallelizes around it (core/ops/gemm.cc)
        lines += [blas[0], "\topenblas_get_num_threads() : %d" % blas[2]]
    dnnl = _onednn_line()
    if dnnl:
        lines.append(dnnl)
    lines.append("std::thread::hardware_concurrency() : %d" % (os.cpu_count() or 1))
    lines.append("Environment variables:")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        lines.append("\t%s : %s" % (var, os.environ.get(var, "[not set]")))
    lines.append("tessel parallel backend: thread pool (core/base/parallel.cc)")
    return "\n".join(lines) + "\n"
