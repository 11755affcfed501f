#!/usr/bin/env bash
# tools/train.sh — the README's "main job" command: setup, build, then train the example GPT.
# Extra arguments go to the trainer (e.g. --steps=100).
set -euo pipefail
ws="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ws"
bash tools/setup.sh
bazel run --ui_event_filters=-info --noshow_progress //examples/gpt:train -- "$@"
