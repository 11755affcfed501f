"""tessel.distributed._composable: torch 2.4-2.5's path of FSDP2 (``from torch.distributed._composable.fsdp
import fully_shard``); see .fsdp."""
