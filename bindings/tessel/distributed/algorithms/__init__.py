"""tessel.distributed.algorithms: torch's activation-checkpoint wrapper (_checkpoint.checkpoint_wrapper)."""
