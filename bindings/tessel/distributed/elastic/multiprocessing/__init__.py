"""tessel.distributed.elastic.multiprocessing: see .errors (torch's `record`) and .api (Std, SignalException)."""
from .api import SignalException, Std, to_map
from .errors import ProcessFailure

__all__ = ["ProcessFailure", "SignalException", "Std", "to_map"]
