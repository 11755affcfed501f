"""The command line and timing loop the tessel-vs-PyTorch benchmark scripts share (init_step.py, optim_step.py):
`--lib=tessel|torch` picks the library the torch-API workload runs on, `--threads` / `--reps` as the report
passes them (benchmarks/figure.h RunOnTesselAndTorch).

Example:
    args, lib = library(__doc__)
    seconds = best_seconds(lambda: work(lib), args.reps)
"""
import argparse
import importlib
import time


def library(description):
    """Parses --lib, --threads (0: the library's default) and --reps; imports the library, sets its threads and
    seeds it with 0. Returns (args, the library module)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--lib", choices=("tessel", "torch"), required=True)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    lib = importlib.import_module(args.lib)
    if args.threads:
        lib.set_num_threads(args.threads)
    lib.manual_seed(0)
    return args, lib


def best_seconds(run, reps):
    """The fastest of `reps` timed calls of run(), after one untimed warm-up call (the allocator's first pages,
    lazy imports)."""
    run()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t)
    return best
