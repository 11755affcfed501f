"""tessel.distributed.fsdp.api: the options of FSDP1's FullyShardedDataParallel, as torch.distributed.fsdp.api
names them (ShardingStrategy, BackwardPrefetch, MixedPrecision, CPUOffload, StateDictType and the state dict
configs). What each maps to on fully_shard is in fully_sharded_data_parallel.py."""
import dataclasses
import enum


class ShardingStrategy(enum.Enum):
    """FULL_SHARD: parameters, gradients and optimizer state sharded; parameters freed after forward.
    SHARD_GRAD_OP: kept unsharded from forward to backward (ZeRO-2). NO_SHARD: replicated, gradients
    all-reduced (DDP). HYBRID_SHARD / _HYBRID_SHARD_ZERO2: FULL_SHARD / SHARD_GRAD_OP within a node,
    replicated across nodes."""
    FULL_SHARD = 1
    SHARD_GRAD_OP = 2
    NO_SHARD = 3
    HYBRID_SHARD = 4
    _HYBRID_SHARD_ZERO2 = 5


class BackwardPrefetch(enum.Enum):
    BACKWARD_PRE = 1
    BACKWARD_POST = 2


class StateDictType(enum.Enum):
    FULL_STATE_DICT = 1
    LOCAL_STATE_DICT = 2
    SHARDED_STATE_DICT = 3


@dataclasses.dataclass
class MixedPrecision:
    """param_dtype: the dtype forward and backward compute in; reduce_dtype: of the gradient reduction
    (None: param_dtype); buffer_dtype: of the buffers; cast_forward_inputs / cast_root_forward_inputs: cast
    floating inputs of every FSDP module / of the root one to param_dtype. Modules of the classes in
    _module_classes_to_ignore (batch norm) get their own unit without mixed precision under auto-wrapping."""
    param_dtype: object = None
    reduce_dtype: object = None
    buffer_dtype: object = None
    keep_low_precision_grads: bool = False
    cast_forward_inputs: bool = False
    cast_root_forward_inputs: bool = True
    _module_classes_to_ignore: tuple = None  # None: the batch norm classes (resolved when wrapping)


@dataclasses.dataclass
class CPUOffload:
    offload_params: bool = False


@dataclasses.dataclass
class StateDictConfig:
    offload_to_cpu: bool = False


@dataclasses.dataclass
class FullStateDictConfig(StateDictConfig):
    """rank0_only: only global rank 0 gets the full state dict (the others an empty one)."""
    rank0_only: bool = False


@dataclasses.dataclass
class ShardedStateDictConfig(StateDictConfig):
    """Values are DTensors (torch's _use_dtensor=True form; tessel has no ShardedTensor)."""
    _use_dtensor: bool = True


@dataclasses.dataclass
class LocalStateDictConfig(StateDictConfig):
    pass


@dataclasses.dataclass
class OptimStateDictConfig:
    offload_to_cpu: bool = False


@dataclasses.dataclass
class FullOptimStateDictConfig(OptimStateDictConfig):
    rank0_only: bool = False


@dataclasses.dataclass
class ShardedOptimStateDictConfig(OptimStateDictConfig):
    _use_dtensor: bool = True


@dataclasses.dataclass
class LocalOptimStateDictConfig(OptimStateDictConfig):
    pass


@dataclasses.dataclass
class StateDictSettings:
    state_dict_type: StateDictType
    state_dict_config: StateDictConfig
    optim_state_dict_config: OptimStateDictConfig
