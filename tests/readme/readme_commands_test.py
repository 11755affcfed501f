"""Checks the ```bash blocks of the top-level README.md: every Bazel label they name is a target declared
in that package's BUILD file, and every script they run exists (the commands themselves run in CI:
tools/test.sh is CI, tools/train.sh's binary has its smoke test).

The source tree is found through the README's runfiles symlink (Bazel's sandbox mounts it read-only).
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import readme_blocks  # noqa: E402

README = os.path.join(os.environ["TEST_SRCDIR"], "tessel", "README.md")
LABEL = re.compile(r"(?:bazel (?:run|test|build)[^\n]*?)(//[\w/.-]*(?::[\w/.-]+)?)")


def target_exists(root, label):
    pkg, _, name = label[2:].partition(":")
    if pkg.endswith("/...") or label.endswith("/..."):
        return os.path.isdir(os.path.join(root, label[2:-4]))
    build = os.path.join(root, pkg, "BUILD.bazel")
    if not os.path.exists(build):
        return False
    name = name or os.path.basename(pkg)
    return re.search(r'name = "%s"' % re.escape(name), open(build, encoding="utf-8").read()) is not None


def main():
    root = os.path.dirname(os.path.realpath(README))
    checked = 0
    for lang, lines in readme_blocks.blocks(README):
        if lang != "bash":
            continue
        for line in lines:
            for label in re.findall(r"//[\w/.-]+(?::[\w/.-]+)?", line.split("#")[0]):
                assert target_exists(root, label), f"README names {label}, which is not a target: {line!r}"
                checked += 1
            for script in re.findall(r"\bbash (tools/[\w.]+)", line):
                assert os.path.exists(os.path.join(root, script)), f"README runs {script}, which does not exist"
                checked += 1
    assert checked >= 10, f"only {checked} labels/scripts found in README bash blocks"
    print(f"{checked} labels and scripts checked")


if __name__ == "__main__":
    main()
