"""tessel.distributed.algorithms: torch's activation-checkpoint wrapper (_checkpoint.checkpoint_wrapper), DDP
communication hooks (ddp_comm_hooks), Join (join) and periodic model averaging (model_averaging)."""
