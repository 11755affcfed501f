"""cuda_configure: the @cuda repository, detected at fetch time so the build works with or without a CUDA toolkit.

What it defines: `@cuda//:cudart`, `@cuda//:cublasLt`, `@cuda//:nccl` (link targets), `@cuda//:toolkit`
(the constraint every CUDA target requires) and `@cuda//:defs.bzl` with CUDA_AVAILABLE, CUDA_PATH,
CUDA_COMPATIBLE (the `target_compatible_with` list for CUDA targets) and CUDA_REASON.

Invariant: CUDA_AVAILABLE is true exactly when `<CUDA_PATH>/bin/nvcc` exists and TESSEL_CUDA is not "0".
Without a toolkit every CUDA target is marked incompatible with the host platform, so `bazel build //...`
and `bazel test //...` skip them (the test summary counts them as skipped) instead of failing.

Choice (environment of the repository rule, set with --repo_env; see .bazelrc):
  TESSEL_CUDA=auto (default): use the toolkit if nvcc is found.   --config=cuda:   TESSEL_CUDA=1 (fail if absent)
  TESSEL_CUDA=0:              never (test the no-toolkit build).   --config=nocuda: TESSEL_CUDA=0
  CUDA_PATH:                  toolkit root, default /usr/local/cuda.

Example (WORKSPACE):
  load("//third_party/cuda:configure.bzl", "cuda_configure")
  cuda_configure(name = "cuda")
"""

_AVAILABLE_BUILD = """\
package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl", "config.txt"])
constraint_setting(name = "toolkit_setting")
constraint_value(name = "toolkit", constraint_setting = ":toolkit_setting")
cc_library(name = "cuda_headers", hdrs = glob(["include/**"]), includes = ["include"])
_L = ["-L{lib}", "-Wl,-rpath,{lib}"]
cc_library(name = "cudart", deps = [":cuda_headers"], linkopts = _L + ["-lcudart", "-ldl", "-lrt", "-pthread"])
cc_library(name = "cublasLt", deps = [":cudart"], linkopts = _L + ["-lcublasLt"])
cc_library(name = "nccl", deps = [":cudart"], linkopts = _L + ["-lnccl"])
"""

# No toolkit: the same target names, each requiring a constraint value no platform has, so every target
# that depends on them (transitively) is skipped by `//...` patterns and rejected when named explicitly.
_ABSENT_BUILD = """\
package(default_visibility = ["//visibility:public"])
exports_files(["defs.bzl", "config.txt"])
constraint_setting(name = "toolkit_setting")
constraint_value(name = "toolkit", constraint_setting = ":toolkit_setting")
[cc_library(name = n, target_compatible_with = [":toolkit"]) for n in ["cuda_headers", "cudart", "cublasLt", "nccl"]]
"""

def _cuda_configure_impl(rctx):
    want = rctx.os.environ.get("TESSEL_CUDA", "auto")
    if want not in ["auto", "0", "1"]:
        fail("TESSEL_CUDA must be auto, 0 or 1, got '%s'" % want)
    path = rctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    has_nvcc = rctx.path(path + "/bin/nvcc").exists
    if want == "1" and not has_nvcc:
        fail("--config=cuda (TESSEL_CUDA=1) but there is no nvcc at %s/bin/nvcc; set CUDA_PATH or drop --config=cuda" % path)
    available = has_nvcc and want != "0"
    if available:
        reason = "toolkit at " + path
        rctx.symlink(path + "/include", "include")
        rctx.file("BUILD.bazel", _AVAILABLE_BUILD.format(lib = path + "/lib64"))
    else:
        reason = "disabled by TESSEL_CUDA=0" if want == "0" else "no nvcc at %s/bin/nvcc" % path
        rctx.file("BUILD.bazel", _ABSENT_BUILD)
    rctx.file("defs.bzl", "\n".join([
        "CUDA_AVAILABLE = %s" % available,
        "CUDA_PATH = %r" % path,
        "CUDA_REASON = %r" % reason,
        "CUDA_COMPATIBLE = %s" % ("[]" if available else '["@cuda//:toolkit"]'),
        "",
    ]))
    rctx.file("config.txt", "available=%d\npath=%s\nreason=%s\n" % (1 if available else 0, path, reason))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["TESSEL_CUDA", "CUDA_PATH"],
    local = True,
)
