"""What tessel's extension was built with and runs on, read from the running process (tessel.__config__ and
tessel.utils.collect_env report it): the compiler from the extension's ELF .comment section, the OpenBLAS,
oneDNN and OpenMP libraries it links (its ELF DT_NEEDED entries, asked through their own C entry points with
ctypes), and the flags of the repository's release build. The extension records no build settings of its
own, so nothing here is compiled in: every answer comes from the binaries actually mapped, or None."""
import ctypes
import os
import re
import struct

# The C++ flags of the release build: .bazelrc's `build` lines (compilation_mode=opt), which `pip install .`
# (bindings/packaging/tessel_build.py) and the tests build with. bindings/tests/utils_benchmark_torch_rules_test.py
# checks this against .bazelrc where the repository is at hand.
CXX_FLAGS = "-std=c++20 -O3 -march=x86-64-v3 -fopenmp -Wall -Wno-sign-compare"
CXX_STANDARD = 202002  # __cplusplus under -std=c++20, what torch's "C++ Version" line prints
_DNNL_RUNTIMES = {0: "none", 1: "sequential", 2: "OpenMP", 4: "TBB", 8: "threadpool", 256: "OpenCL", 512: "SYCL"}


def extension_path():
    from . import _C
    return getattr(_C, "__file__", None)


def linked_libraries():
    """{"openblas" | "dnnl" | "gomp" | "gloo": soname} of the libraries the extension links (its DT_NEEDED entries):
    by soname, not by what the process has mapped, since numpy's wheel can bring an OpenBLAS of its own."""
    path = extension_path()
    dynamic, strings = (_elf_section(path, b".dynamic"), _elf_section(path, b".dynstr")) if path else (None, None)
    found = {}
    for i in range(0, len(dynamic or b"") - 15, 16):
        tag, value = struct.unpack_from("<qQ", dynamic, i)
        if tag == 0:  # DT_NULL ends the table
            break
        if tag != 1:  # DT_NEEDED
            continue
        name = strings[value:strings.index(b"\0", value)].decode()
        for key in ("openblas", "dnnl", "gomp", "gloo"):
            if name.startswith("lib" + key):
                found.setdefault(key, name)
    return found


def _library(key):
    name = linked_libraries().get(key)
    if name is None:
        return None
    try:  # RTLD_NOLOAD: the copy the extension already loaded, never a second one
        return ctypes.CDLL(name, mode=os.RTLD_NOLOAD)
    except OSError:
        return None


def _elf_section(path, wanted):
    """The bytes of one section of a little-endian ELF64 file, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None
            shoff, = struct.unpack_from("<Q", head, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            f.seek(shoff)
            table = f.read(shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQ", table, i * shentsize) for i in range(shnum)]
            names_offset, names_size = sections[shstrndx][4], sections[shstrndx][5]
            f.seek(names_offset)
            names = f.read(names_size)
            for name, _, _, _, offset, size in sections:
                if names[name:names.index(b"\0", name)] == wanted:
                    f.seek(offset)
                    return f.read(size)
    except (OSError, ValueError, IndexError, struct.error):
        return None
    return None


def compiler():
    """("GCC", "12.2.0", the whole .comment entry) of the compiler that built the extension, or None."""
    path = extension_path()
    comment = _elf_section(path, b".comment") if path else None
    for entry in (comment or b"").split(b"\0"):
        text = entry.decode("ascii", "replace")
        match = re.match(r"GCC: (?:\(.*\) )?(\d[\w.]*)", text)
        if match:
            return "GCC", match.group(1), text
        match = re.search(r"clang version (\d[\w.]*)", text)
        if match:
            return "clang", match.group(1), text
    return None


def has_debug_info():
    path = extension_path()
    return bool(path) and _elf_section(path, b".debug_info") is not None


def openblas():
    """(openblas_get_config(), openblas_get_corename(), openblas_get_num_threads()) or None."""
    lib = _library("openblas")
    if lib is None:
        return None
    lib.openblas_get_config.restype = ctypes.c_char_p
    lib.openblas_get_corename.restype = ctypes.c_char_p
    return (lib.openblas_get_config().decode(), lib.openblas_get_corename().decode(),
            int(lib.openblas_get_num_threads()))


class _DnnlVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int),
                ("hash", ctypes.c_char_p), ("cpu_runtime", ctypes.c_uint), ("gpu_runtime", ctypes.c_uint)]


def onednn():
    """("v2.6.3", git hash, CPU runtime name) of the loaded oneDNN (dnnl_version()), or None."""
    lib = _library("dnnl")
    if lib is None:
        return None
    lib.dnnl_version.restype = ctypes.POINTER(_DnnlVersion)
    v = lib.dnnl_version().contents
    return ("v%d.%d.%d" % (v.major, v.minor, v.patch), (v.hash or b"N/A").decode(),
            _DNNL_RUNTIMES.get(v.cpu_runtime, str(v.cpu_runtime)))


def omp_max_threads():
    """libgomp's omp_get_max_threads() on this thread (tessel.set_num_threads sets it too), or None."""
    lib = _library("gomp")
    return None if lib is None else int(lib.omp_get_max_threads())
