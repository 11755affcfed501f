"""torch.distributed.pipelining._utils's exception type, where torch's code and user code catch it."""


class PipeliningMetadataError(RuntimeError):
    """A stage's inputs or outputs that pipelining cannot carry (torch's: raised on metadata mismatches)."""
