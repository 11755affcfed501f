"""tessel.distributed.elastic: the parts of torch.distributed.elastic a training script imports (the launchers
are python -m tessel.distributed.run, tessel.distributed.launcher.api, and the C++ tessel-run,
comm/launcher/tessel_run.cc)."""
