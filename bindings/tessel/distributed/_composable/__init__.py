"""tessel.distributed._composable: torch's composable APIs, applied to a module in place (its names and
state-dict keys unchanged): ``replicate`` (DDP, .replicate; torch 2.15's FSDP-based one is
.replicate_with_fsdp.replicate), ``checkpoint`` (activation checkpointing, .checkpoint_activation),
``contract`` / ``_get_registry`` (which of them a module has, .contract), and torch 2.4-2.5's path of FSDP2
(``from torch.distributed._composable.fsdp import fully_shard``, .fsdp)."""
from .checkpoint_activation import checkpoint  # noqa: F401
from .contract import _get_registry, contract  # noqa: F401
from .replicate import replicate  # noqa: F401
