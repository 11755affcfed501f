"""cuda_library: compiles .cu files with nvcc into PIC objects wrapped in a cc_library."""
NVCC = "/usr/local/cuda/bin/nvcc"  # absolute: strict action env keeps /usr/local/cuda/bin off PATH
DEFAULT_GENCODE = ["arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"]

def cuda_library(name, srcs, hdrs = [], deps = [], hdr_srcs = [], nvcc_flags = [], gencode = DEFAULT_GENCODE, **kwargs):
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
        )
        objs.append(obj)
    native.cc_library(name = name, srcs = objs, hdrs = hdrs, deps = deps + ["@cuda//:cudart"], **kwargs)
