"""tessel.distributed.elastic.multiprocessing: see .errors (torch's `record`)."""
