"""tessel.distributed.elastic: the parts of torch.distributed.elastic a training script imports (the launcher
itself is tessel-run, comm/launcher/tessel_run.cc)."""
