"""torch.utils.benchmark.utils for tessel: the modules behind tessel.utils.benchmark (common, timer, compare,
fuzzer), kept under torch's module paths so `from torch.utils.benchmark.utils.common import Measurement` ports."""
