"""torch.distributed.optim.PostLocalSGDOptimizer: an optimizer whose step() is the wrapped optimizer's step
followed by the averager's (periodic model averaging: local SGD after DDP's warm-up with the post_localSGD hook).

    opt = PostLocalSGDOptimizer(tessel.optim.SGD(model.parameters(), lr=0.01),
                                PeriodicModelAverager(period=4, warmup_steps=100))
"""
import warnings

__all__ = ["PostLocalSGDOptimizer"]


class PostLocalSGDOptimizer:
    def __init__(self, optim, averager):
        self.optim, self.averager = optim, averager
        self.param_groups = self.optim.param_groups

    @property
    def state(self):
        return self.optim.state

    def __repr__(self):
        return repr(self.optim)

    def state_dict(self):
        """The wrapped optimizer's, plus the averager's step counter under "step" (torch's layout)."""
        sd = self.optim.state_dict()
        sd["step"] = self.averager.step
        return sd

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)
        if "step" in state_dict:
            self.averager.step = state_dict["step"]
        else:
            warnings.warn("Loaded state dict does not contain a step counter for an averager. Setting step counter "
                          "to 0.", stacklevel=2)
            self.averager.step = 0

    def step(self):
        self.optim.step()
        self.averager.average_parameters(params=self.param_groups)

    def zero_grad(self, set_to_none=True):
        self.optim.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group):
        self.optim.add_param_group(param_group)
