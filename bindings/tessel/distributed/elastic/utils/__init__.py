"""tessel.distributed.elastic.utils: torch's `macros`, the placeholders a launcher replaces in a worker's
arguments (tessel.distributed.run replaces ${local_rank} with each worker's local rank)."""
import string

__all__ = ["macros"]


class macros:  # noqa: N801 (torch's name)
    local_rank = "${local_rank}"

    @staticmethod
    def substitute(args, local_rank):
        """args with ${local_rank} replaced in each string (other placeholders and non-strings kept)."""
        return [string.Template(a).safe_substitute(local_rank=local_rank) if isinstance(a, str) else a for a in args]
