"""Who may depend on core/ (DESIGN.md: each folder depends only on folders above it in the layer list).

core/ is the bottom layer, so every layer above it may use it: the list names them instead of
//visibility:public, so a package outside the layering (third_party/, a stray new folder) cannot.
Inside core/ the order base, memory, tensor, dispatch, autograd, ops, nn, optim is kept by review, not by
Bazel: core/memory uses core/tensor:device and core/tensor uses core/memory, so a per-package list would
first need that split.
"""

CORE_VISIBLE_TO = [
    "//:__pkg__",  # the public umbrella //:tessel (BUILD.bazel)
    "//core:__subpackages__",
    "//comm:__subpackages__",
    "//dtensor:__subpackages__",
    "//fsdp:__subpackages__",
    "//tp:__subpackages__",
    "//pipelining:__subpackages__",
    "//checkpoint:__subpackages__",
    "//planner:__subpackages__",
    "//bindings:__subpackages__",
    "//examples:__subpackages__",
    "//benchmarks:__subpackages__",
    "//tests:__subpackages__",
]
