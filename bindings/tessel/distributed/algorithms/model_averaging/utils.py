"""torch.distributed.algorithms.model_averaging.utils: the parameters averaged across a process group in one
all-reduce of a flat buffer (written back in place: the Parameter objects, and an optimizer's references to
them, stay the same)."""
from .... import _C
from ... import all_reduce, get_world_size, _group
from ..._flat import flatten, views

__all__ = ["average_parameters", "get_params_to_average", "average_parameters_or_parameter_groups"]


def average_parameters(params, process_group):
    """Every parameter set to its mean over the group (one all-reduce); a rank outside the group does nothing."""
    from ... import GroupMember
    group = _group(process_group, "average_parameters")
    if group is GroupMember.NON_GROUP_MEMBER:
        return
    params = list(params)
    if not params:
        return
    with _C._GradMode(False):
        flat = flatten([p.detach().to(params[0].dtype) for p in params])
        flat.div_(get_world_size(group))
        all_reduce(flat, group=group)
        for p, mean in zip(params, views(flat, params)):
            p.copy_(mean.to(p.dtype))


def get_params_to_average(params):
    """The parameters (or the parameters of parameter groups) that have a gradient, as torch's."""
    out = []
    for item in params:
        if isinstance(item, dict):
            out.extend(p for p in item["params"] if p.grad is not None)
        elif isinstance(item, _C.Tensor):
            if item.grad is not None:
                out.append(item)
        else:
            raise NotImplementedError("Parameter input of type %s is not supported" % type(item))
    return out


def average_parameters_or_parameter_groups(params, process_group):
    average_parameters(iter(get_params_to_average(params)), process_group)
