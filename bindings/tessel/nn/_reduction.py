"""torch.nn._reduction: the deprecated size_average / reduce arguments of the losses read as reduction=, with
torch's warning (legacy_get_string), and reduction names as enums (get_enum)."""
import warnings


def get_enum(reduction):
    """torch's enum of a reduction name: none 0, mean 1, sum 2."""
    if reduction == "none":
        return 0
    if reduction in ("mean", "elementwise_mean"):
        return 1
    if reduction == "sum":
        return 2
    raise ValueError("%s is not a valid value for reduction" % reduction)


def legacy_get_string(size_average, reduce, emit_warning=True):
    """The reduction the deprecated pair means: both unset or true 'mean', size_average False 'sum', reduce
    False 'none'; warns as torch."""
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if size_average and reduce else "sum" if reduce else "none"
    if emit_warning:
        warnings.warn("size_average and reduce args will be deprecated, please use reduction='%s' instead." % ret,
                      stacklevel=3)
    return ret


def legacy_get_enum(size_average, reduce, emit_warning=True):
    return get_enum(legacy_get_string(size_average, reduce, emit_warning))
