"""`pip install .` packaging: the in-tree backend (bindings/packaging/tessel_build.py) packs the package
tree and the built _C.so into a wheel that pip installs into a fresh virtual environment, where tessel
imports from site-packages (not from the repository, no PYTHONPATH) and trains a module."""
import os
import subprocess
import sys
import zipfile

import pytest

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""), "tessel")
sys.path.insert(0, os.path.join(RUNFILES, "bindings", "packaging"))
import tessel_build  # noqa: E402


def test_wheel_installs_into_a_fresh_venv_and_imports_outside_the_repo(tmp_path):
    os.environ["TESSEL_C_SO"] = os.path.join(RUNFILES, "bindings", "tessel", "_C.so")
    wheel = tmp_path / tessel_build.build_wheel(str(tmp_path))
    names = zipfile.ZipFile(wheel).namelist()
    for f in ("tessel/_C.so", "tessel/__init__.py", "tessel/nn/modules.py", "tessel/distributed/fsdp/__init__.py",
              "tessel-0.1.0.dist-info/RECORD"):
        assert f in names, f
    venv = tmp_path / "venv"
    # --system-site-packages: numpy (the one dependency) comes from Debian, so nothing is downloaded.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-deps", str(wheel)],
                         capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import tessel, tessel.nn as nn; m = nn.Sequential(nn.Linear(3, 4), nn.GELU()); "
            "opt = tessel.optim.SGD(m.parameters(), lr=0.1); m(tessel.ones(2, 3)).sum().backward(); opt.step(); "
            "print(tessel.__file__)")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(venv / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages" /
                                     "tessel" / "__init__.py")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
