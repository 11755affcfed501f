"""torch.nn.utils.stateless: functional_call (torch's older path of torch.func.functional_call)."""
from ...func import functional_call  # noqa: F401
