#!/usr/bin/env python3
"""Extracts the fenced code blocks of README.md so tests can run or compile every one of them.

  readme_blocks.py cpp README.md NAME OUT   writes the ```cpp block whose first line is `// file: NAME` to OUT
  readme_blocks.py list README.md           prints "<lang> <first line>" per block (for humans)

Why by hand: a README is Markdown that GitHub renders; no Debian package extracts named fenced blocks, and the
rule is twenty lines. A block with a `// file: NAME` first line is a whole translation unit (a test compiles and
runs it); Python blocks are run by tests/readme/readme_python_test.py; bash blocks are checked for the Bazel
labels and scripts they name by tests/readme/readme_commands_test.py.
"""
import re
import sys

FENCE = re.compile(r"^```(\w*)\s*$")


def blocks(path):
    """Yields (language, [lines]) for every fenced block of the Markdown file at `path`."""
    lang, body = None, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = FENCE.match(line.rstrip("\n"))
            if m and lang is None:
                lang, body = m.group(1) or "text", []
            elif line.rstrip() == "```" and lang is not None:
                yield lang, body
                lang = None
            elif lang is not None:
                body.append(line)
    if lang is not None:
        raise SystemExit(f"{path}: unterminated ``` block ({lang})")


def main(argv):
    if len(argv) == 5 and argv[1] == "cpp":
        _, _, readme, name, out = argv
        found = [b for lang, b in blocks(readme) if lang == "cpp" and b and b[0].strip() == f"// file: {name}"]
        if len(found) != 1:
            raise SystemExit(f"{readme}: expected one ```cpp block starting with '// file: {name}', found {len(found)}")
        with open(out, "w", encoding="utf-8") as f:
            f.writelines(found[0])
        return 0
    if len(argv) == 3 and argv[1] == "list":
        for lang, b in blocks(argv[2]):
            print(lang, b[0].rstrip() if b else "")
        return 0
    raise SystemExit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
