"""tessel.distributed.algorithms._checkpoint: checkpoint_wrapper, as torch lays it out."""
