"""tessel.distributed.algorithms.ddp_comm_hooks: torch's DDP communication hooks (default_hooks, powerSGD_hook,
post_localSGD_hook) and register_ddp_comm_hook(DDPCommHookType.X, model) for the built-in ones."""
import enum
import functools

from . import default_hooks, post_localSGD_hook, powerSGD_hook  # noqa: F401


def _with_powerSGD(matrix_approximation_rank, model, state, hook=powerSGD_hook.powerSGD_hook):
    hook_state = powerSGD_hook.PowerSGDState(process_group=state, matrix_approximation_rank=matrix_approximation_rank)
    model.register_comm_hook(hook_state, hook)


class DDPCommHookType(enum.Enum):
    """torch's built-in hooks by name: ALLREDUCE, FP16_COMPRESS, BF16_COMPRESS, POWER_SGD (rank 1),
    POWER_SGD_RANK2 (PowerSGDState's other defaults), BATCHED_POWER_SGD and BATCHED_POWER_SGD_RANK2."""
    ALLREDUCE = functools.partial(lambda model, state: model.register_comm_hook(state, default_hooks.allreduce_hook))
    FP16_COMPRESS = functools.partial(
        lambda model, state: model.register_comm_hook(state, default_hooks.fp16_compress_hook))
    BF16_COMPRESS = functools.partial(
        lambda model, state: model.register_comm_hook(state, default_hooks.bf16_compress_hook))
    POWER_SGD = functools.partial(_with_powerSGD, 1)
    POWER_SGD_RANK2 = functools.partial(_with_powerSGD, 2)
    BATCHED_POWER_SGD = functools.partial(_with_powerSGD, 1, hook=powerSGD_hook.batched_powerSGD_hook)
    BATCHED_POWER_SGD_RANK2 = functools.partial(_with_powerSGD, 2, hook=powerSGD_hook.batched_powerSGD_hook)


def register_ddp_comm_hook(comm_hook_type, model, state=None):
    """Registers the built-in hook `comm_hook_type` on the DDP `model` (state: the process group, None for
    the model's)."""
    comm_hook_type.value(model=model, state=state)
