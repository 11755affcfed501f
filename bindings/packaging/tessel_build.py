"""bindings/packaging/tessel_build.py — the in-tree PEP 517 build backend behind `pip install .`.

It drives Bazel (`bazel build //bindings:tessel/_C.so`, the disk cache makes a rebuild quick) and packs
bindings/tessel/**/*.py plus the built _C.so into a wheel. No build requirements are fetched: it needs
only the standard library, Bazel and the toolchain of tools/setup.sh.

Invariant: the wheel holds exactly the package tree a py_test sees in its runfiles (the same .py files
and the same _C.so), so what the tests check is what pip installs.

    pip install .                          # from the repository root (pyproject.toml names this backend)
    TESSEL_C_SO=/path/to/_C.so pip wheel . # pack a _C.so built elsewhere instead of running Bazel
"""
import base64
import hashlib
import os
import subprocess
import sys
import sysconfig
import zipfile

NAME, VERSION = "tessel", "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "bindings", "tessel")


def _tag():
    py = "cp%d%d" % sys.version_info[:2]
    return "%s-%s-%s" % (py, py, sysconfig.get_platform().replace("-", "_").replace(".", "_"))


def _built_extension():
    prebuilt = os.environ.get("TESSEL_C_SO")
    if prebuilt:
        return prebuilt
    subprocess.run(["bazel", "build", "--jobs=2", "//bindings:tessel/_C.so"], cwd=ROOT, check=True,
                   stdout=sys.stderr)
    return os.path.join(ROOT, "bazel-bin", "bindings", "tessel", "_C.so")


def _files(extension):
    """(path in the wheel, path on disk) for every file of the package."""
    out = []
    for dirpath, dirnames, filenames in os.walk(PACKAGE):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                full = os.path.join(dirpath, f)
                out.append((os.path.join(NAME, os.path.relpath(full, PACKAGE)), full))
    out.append((os.path.join(NAME, "_C.so"), extension))
    return out


def _metadata():
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: DTensor-style composable sharding with "
            "PyTorch's names (C++ core, Python face)\nRequires-Python: >=3.11\nRequires-Dist: numpy<2\n"
            % (NAME, VERSION))


def _wheel_file():
    return "Wheel-Version: 1.0\nGenerator: tessel_build\nRoot-Is-Purelib: false\nTag: %s\n" % _tag()


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    dist_info = "%s-%s.dist-info" % (NAME, VERSION)
    wheel_name = "%s-%s-%s.whl" % (NAME, VERSION, _tag())
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as whl:
        entries = [(arc, open(path, "rb").read()) for arc, path in _files(_built_extension())]
        entries += [(dist_info + "/METADATA", _metadata().encode()), (dist_info + "/WHEEL", _wheel_file().encode())]
        for arcname, data in entries:
            info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arcname.endswith(".so") else 0o644) << 16
            whl.writestr(info, data, zipfile.ZIP_DEFLATED)
            records.append(_record_line(arcname, data))
        records.append(dist_info + "/RECORD,,")
        whl.writestr(dist_info + "/RECORD", "\n".join(records) + "\n")
    return wheel_name


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = os.path.join(metadata_directory, "%s-%s.dist-info" % (NAME, VERSION))
    os.makedirs(dist_info, exist_ok=True)
    with open(os.path.join(dist_info, "METADATA"), "w") as f:
        f.write(_metadata())
    with open(os.path.join(dist_info, "WHEEL"), "w") as f:
        f.write(_wheel_file())
    return os.path.basename(dist_info)
