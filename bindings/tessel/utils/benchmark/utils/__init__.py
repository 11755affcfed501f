"""torch.utils.benchmark.utils: the modules behind tessel.utils.benchmark (common, timer, compare), importable
by torch's paths (`from torch.utils.benchmark.utils.common import Measurement`)."""
