"""torch.nn.utils.stateless: functional_call, torch's older (deprecated) path of torch.func.functional_call."""
import warnings

from ...func import functional_call as _functional_call


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """torch.func.functional_call with one dict only (torch's older signature), after torch's FutureWarning."""
    warnings.warn("`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will be removed in "
                  "a future version of PyTorch. Please use `torch.func.functional_call` instead which is a drop-in "
                  "replacement.", FutureWarning, stacklevel=2)
    if not hasattr(parameters_and_buffers, "items"):  # torch reads it as a dict: a tuple of dicts fails there
        raise AttributeError("'%s' object has no attribute '%s'"
                             % (type(parameters_and_buffers).__name__, "keys" if tie_weights else "items"))
    return _functional_call(module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict)
