"""tessel.distributed._composable.fsdp: torch 2.4-2.5's path of tessel.distributed.fsdp (fully_shard and its
policies); the same objects."""
from ...fsdp import (CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, UnshardHandle,  # noqa: F401
                     fully_shard, register_fsdp_forward_method)

__all__ = ["fully_shard", "FSDPModule", "MixedPrecisionPolicy", "CPUOffloadPolicy", "OffloadPolicy", "UnshardHandle",
           "register_fsdp_forward_method"]
