"""Who may depend on comm/ (DESIGN.md's layer list): the layers above it. planner/ and core/ may not."""

COMM_VISIBLE_TO = [
    "//:__pkg__",  # the public umbrella //:tessel (BUILD.bazel)
    "//comm:__subpackages__",
    "//dtensor:__subpackages__",
    "//fsdp:__subpackages__",
    "//tp:__subpackages__",
    "//pipelining:__subpackages__",
    "//checkpoint:__subpackages__",
    "//bindings:__subpackages__",
    "//examples:__subpackages__",
    "//benchmarks:__subpackages__",
    "//tests:__subpackages__",
]
