"""Runs every ```python block of the top-level README.md, in order, each in a fresh namespace.

The README promises its code blocks work as written; this is the test that holds it to that for Python
(the C++ blocks are compiled and run by the tour_*_test targets beside this file).
"""
import os
import runpy
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import readme_blocks  # noqa: E402

README = os.path.join(os.environ["TEST_SRCDIR"], "tessel", "README.md")


def main():
    blocks = [b for lang, b in readme_blocks.blocks(README) if lang == "python"]
    assert blocks, "README.md has no ```python block"
    for i, lines in enumerate(blocks):
        with tempfile.NamedTemporaryFile("w", suffix=f"_readme_block_{i}.py", delete=False) as f:
            f.writelines(lines)
        print(f"README python block {i} ({len(lines)} lines)", flush=True)
        runpy.run_path(f.name, run_name="__main__")
    print(f"{len(blocks)} python block(s) ran")


if __name__ == "__main__":
    main()
