"""cuda_library / cuda_test: CUDA targets that compile with nvcc when a toolkit is present and are skipped otherwise.

Invariant: every target these macros make carries CUDA_COMPATIBLE (from @cuda, see configure.bzl), so
with no toolkit `bazel test //...` reports them as skipped and never runs nvcc; with one, .cu files are
compiled for sm_90a (Hopper SASS, wgmma/TMA allowed) plus compute_90 PTX (JIT on newer GPUs).

Example:
  load("//third_party/cuda:defs.bzl", "cuda_library", "cuda_test")
  cuda_library(name = "elementwise_cuda", srcs = ["elementwise.cu"], hdrs = ["elementwise_cuda.h"])
  cuda_test(name = "elementwise_cuda_test", srcs = ["elementwise_cuda_test.cc"], deps = [":elementwise_cuda"])
"""

load("@cuda//:defs.bzl", "CUDA_COMPATIBLE", "CUDA_PATH")

NVCC = CUDA_PATH + "/bin/nvcc"  # absolute: strict action env keeps the toolkit's bin off PATH

# sm_90a SASS is not forward compatible (runs on sm_90 only), so the compute_90 PTX entry stays.
DEFAULT_GENCODE = ["arch=compute_90a,code=sm_90a", "arch=compute_90,code=compute_90"]

def cuda_library(name, srcs, hdrs = [], deps = [], hdr_srcs = [], nvcc_flags = [], gencode = DEFAULT_GENCODE, **kwargs):
    """A cc_library of nvcc-compiled PIC objects. hdr_srcs: headers the .cu files include (not exported)."""
    objs = []
    for src in srcs:
        stem = src.replace("/", "_").rsplit(".", 1)[0]
        obj = "_objs/%s/%s.o" % (name, stem)
        native.genrule(
            name = "%s_%s_nvcc" % (name, stem),
            srcs = [src] + hdrs + hdr_srcs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-ccbin /usr/bin/g++",
                "-c -O3 -std=c++20 -Xcompiler -fPIC --expt-relaxed-constexpr -lineinfo",
                " ".join(["-gencode " + g for g in gencode]),
                "-I. -I$(GENDIR)",
                " ".join(nvcc_flags),
                "-o $@ $(location %s)" % src,
            ]),
            message = "nvcc %s" % src,
            target_compatible_with = CUDA_COMPATIBLE,
            tags = ["cuda"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        target_compatible_with = CUDA_COMPATIBLE,
        **kwargs
    )

def cuda_test(name, tags = [], **kwargs):
    """A cc_test that needs the toolkit to build; at run time it GTEST_SKIPs when no GPU is visible."""
    native.cc_test(name = name, tags = tags + ["cuda"], target_compatible_with = CUDA_COMPATIBLE, **kwargs)

def cuda_host_test(name, tags = [], **kwargs):
    """A cuda_test that needs the toolkit to link but no GPU to run: it runs where it is built (here, CI)
    and tools/gpu_bundle.sh leaves it out of the GPU bundle (the "cuda_host" tag)."""
    cuda_test(name = name, tags = tags + ["cuda_host"], **kwargs)
