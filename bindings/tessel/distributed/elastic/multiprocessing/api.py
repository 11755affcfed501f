"""torch.distributed.elastic.multiprocessing.api's small public types: Std (which standard streams a launcher
sends to files) and SignalException (a launcher's death signal, raised inside it)."""
import enum
import re

__all__ = ["SignalException", "Std", "to_map"]


class SignalException(Exception):
    """Raised inside a launcher when it receives a death signal (SIGTERM, SIGINT, ...); sigval is the signal."""

    def __init__(self, msg, sigval):
        super().__init__(msg)
        self.sigval = sigval


class Std(enum.IntFlag):
    NONE = 0
    OUT = 1
    ERR = 2
    ALL = 3

    @classmethod
    def from_str(cls, vm):
        """"3" -> Std.ALL; "0:1,1:2" -> {0: Std.OUT, 1: Std.ERR} (a launcher's --redirects / --tee)."""
        if re.fullmatch(r"[0-3]", vm):
            return cls(int(vm))
        if re.fullmatch(r"([0-9]+:[0-3],)*[0-9]+:[0-3]", vm):
            return {int(r): cls(int(v)) for r, v in (item.split(":") for item in vm.split(","))}
        raise ValueError("%s does not match: <[0-3]> or <([0-9]+:[0-3],)*[0-9]+:[0-3]>" % vm)


def to_map(val_or_map, local_world_size):
    """Std for each of local_world_size local ranks (a mapping's missing ranks: Std.NONE)."""
    if isinstance(val_or_map, Std):
        return {r: val_or_map for r in range(local_world_size)}
    return {r: val_or_map.get(r, Std.NONE) for r in range(local_world_size)}
