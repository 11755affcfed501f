"""torch's activation, dropout, loss and small layer modules written in Python on tessel.nn.Module
(modules.py gives Module its torch-shaped methods): GELU/SiLU/ReLU/Tanh/Identity, Dropout and Dropout1d/2d/3d,
the parameter-free modules over tessel's functional forms (_make_extra_modules: Sigmoid, Softmax, ...,
BCEWithLogitsLoss, NLLLoss, ...), PairwiseDistance/CosineSimilarity, the three-input losses, PReLU,
GroupNorm, EmbeddingBag, Bilinear, CrossEntropyLoss and MSELoss.

    act = tessel.nn.GELU(approximate="tanh")
    loss = tessel.nn.CrossEntropyLoss(label_smoothing=0.1)(logits, target)
"""
from .. import _C, _dtypes
from . import _reduction, functional
from .modules import Module, Parameter


# ---- stateless modules ------------------------------------------------------------------------------

class GELU(Module):
    def __init__(self, approximate="none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return _C._functional.gelu(input, self.approximate)

    def extra_repr(self):
        return "approximate='%s'" % self.approximate


class SiLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return functional.silu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class ReLU(Module):
    """torch.nn.ReLU (inplace=True: the input holds the result where that loses nothing, tessel/_inplace.py)."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return functional.relu(input, inplace=self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class Tanh(Module):
    def forward(self, input):
        return _C._functional.tanh(input)


class Identity(Module):
    def __init__(self, *args, **kwargs):  # torch's Identity ignores any arguments
        super().__init__()

    def forward(self, input):
        return input


class Dropout(Module):
    """torch.nn.Dropout: F.dropout(x, p, self.training) (tessel.nn.functional.dropout)."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return functional.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return "p=%s, inplace=%s" % (self.p, self.inplace)


def _channel_dropout_module(name, fn_name):
    class ChannelDropout(Dropout):
        def forward(self, x):
            return getattr(functional, fn_name)(x, self.p, self.training, self.inplace)
    ChannelDropout.__name__ = ChannelDropout.__qualname__ = name
    ChannelDropout.__doc__ = "torch.nn.%s: whole channels dropped (tessel.nn.functional.%s)." % (name, fn_name)
    return ChannelDropout


Dropout1d = _channel_dropout_module("Dropout1d", "dropout1d")
Dropout2d = _channel_dropout_module("Dropout2d", "dropout2d")
Dropout3d = _channel_dropout_module("Dropout3d", "dropout3d")


def _elementwise_module(name, fn, doc, *fields, check=None):
    """A parameter-free module computing fn(x, *its options) (torch's activation / shape modules); check(self)
    validates the options as torch's constructor does."""
    defaults = [f[1] for f in fields]
    names = [f[0] for f in fields]

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(names):
            raise TypeError("%s.__init__() takes %d positional arguments but %d were given"
                            % (name, len(names) + 1, len(args) + 1))
        unknown = [k for k in kwargs if k not in names]
        if unknown:  # torch's: nn.Sigmoid(inplace=True) is a TypeError
            raise TypeError("%s.__init__() got an unexpected keyword argument '%s'" % (name, unknown[0]))
        values = dict(zip(names, defaults))
        values.update(zip(names, args))
        values.update(kwargs)
        for k, v in values.items():
            object.__setattr__(self, k, v)
        if check is not None:
            check(self)

    def forward(self, input):
        if "inplace" in names:  # torch's activations with inplace=True write their input
            return fn(input, *[getattr(self, n) for n in names if n != "inplace"], inplace=self.inplace)
        return fn(input, *[getattr(self, n) for n in names])

    def extra_repr(self):  # torch's: inplace only when set, size / lambd positional
        parts = []
        for n in names:
            v = getattr(self, n)
            if n == "inplace":
                if v and name not in ("Hardsigmoid", "Hardswish"):
                    parts.append("inplace=True")
            elif n in ("size", "lambd"):
                parts.append(str(v))
            else:
                parts.append("%s=%s" % (n, v))
        return ", ".join(parts)

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr, "__doc__": doc})


def _check_multi_margin(values):
    if values["p"] != 1 and values["p"] != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if values["weight"] is not None and values["weight"].dim() != 1:
        raise ValueError("MultiMarginLoss: expected weight to be None or 1D tensor, got %dD instead"
                         % values["weight"].dim())


def _loss_module(name, fn, doc, signature, passes, check=None):
    """torch's loss modules: `signature` is torch's constructor parameter order with defaults (positional
    arguments bind in it; unknown keywords are a TypeError); `passes` the ones handed to the functional
    form; the deprecated size_average / reduce become reduction= with torch's warning; weight / pos_weight are
    buffers."""
    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        if len(args) > len(signature):
            raise TypeError("%s takes at most %d arguments, got %d" % (name, len(signature), len(args)))
        values = dict(signature)
        values.update(zip([k for k, _ in signature], args))
        unknown = set(kwargs) - set(values)
        if unknown:
            raise TypeError("%s got unexpected keyword arguments %s" % (name, sorted(unknown)))
        values.update(kwargs)
        if values.get("size_average") is not None or values.get("reduce") is not None:
            values["reduction"] = _reduction.legacy_get_string(values.get("size_average"), values.get("reduce"))
        if check is not None:  # torch's constructor checks
            check(values)
        for k in passes:
            if k in ("weight", "pos_weight"):  # buffers, as torch's: in the state dict, moved by .to() / .double()
                self.register_buffer(k, values[k])
            else:
                object.__setattr__(self, k, values[k])

    def forward(self, input, target):
        return fn(input, target, **{k: getattr(self, k) for k in passes})

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__doc__": doc})


def _softmax_dim(x, dim, name="softmax"):
    """torch's legacy softmax dim for dim=None: 0 for 0-, 1- and 3-D inputs, else 1, with torch's warning."""
    if dim is not None:
        return dim
    import warnings
    warnings.warn("Implicit dimension choice for %s has been deprecated. Change the call to include dim=X as an "
                  "argument." % name, stacklevel=4)
    return 0 if x.ndim in (0, 1, 3) else 1


def _check_hardtanh(m):
    if not m.max_val > m.min_val:
        raise AssertionError("max_val (%s) must be greater than min_val (%s)" % (m.max_val, m.min_val))


def _rrelu_module(rrelu):
    class RReLU(Module):
        """torch.nn.RReLU: in training a slope drawn per element from U(lower, upper), in eval their mean."""

        def __init__(self, lower=1.0 / 8, upper=1.0 / 3, inplace=False):
            Module.__init__(self)
            self.lower, self.upper, self.inplace = lower, upper, inplace

        def forward(self, input):
            return rrelu(input, self.lower, self.upper, self.training, self.inplace)

        def extra_repr(self):
            return "lower=%s, upper=%s%s" % (self.lower, self.upper, ", inplace=True" if self.inplace else "")
    return RReLU


def _make_extra_modules():
    from .. import _composed as Z, _extra as X
    return dict(
        LPPool1d=_elementwise_module("LPPool1d", Z.lp_pool1d, "torch.nn.LPPool1d", ("norm_type", None),
                                     ("kernel_size", None), ("stride", None), ("ceil_mode", False)),
        LPPool2d=_elementwise_module("LPPool2d", Z.lp_pool2d, "torch.nn.LPPool2d", ("norm_type", None),
                                     ("kernel_size", None), ("stride", None), ("ceil_mode", False)),
        LPPool3d=_elementwise_module("LPPool3d", Z.lp_pool3d, "torch.nn.LPPool3d", ("norm_type", None),
                                     ("kernel_size", None), ("stride", None), ("ceil_mode", False)),
        PoissonNLLLoss=_loss_module("PoissonNLLLoss", Z.poisson_nll_loss, "torch.nn.PoissonNLLLoss",
                                    [("log_input", True), ("full", False), ("size_average", None), ("eps", 1e-8),
                                     ("reduce", None), ("reduction", "mean")],
                                    ["log_input", "full", "eps", "reduction"]),
        RReLU=_rrelu_module(Z.rrelu),
        LocalResponseNorm=_elementwise_module("LocalResponseNorm", Z.local_response_norm, "torch.nn.LocalResponseNorm",
                                              ("size", None), ("alpha", 1e-4), ("beta", 0.75), ("k", 1.0)),
        MultiMarginLoss=_loss_module("MultiMarginLoss", Z.multi_margin_loss, "torch.nn.MultiMarginLoss",
                                     [("p", 1), ("margin", 1.0), ("weight", None), ("size_average", None),
                                      ("reduce", None), ("reduction", "mean")], ["p", "margin", "weight", "reduction"],
                                     check=_check_multi_margin),
        MultiLabelSoftMarginLoss=_loss_module("MultiLabelSoftMarginLoss", Z.multilabel_soft_margin_loss,
                                              "torch.nn.MultiLabelSoftMarginLoss",
                                              [("weight", None), ("size_average", None), ("reduce", None),
                                               ("reduction", "mean")], ["weight", "reduction"]),
        Sigmoid=_elementwise_module("Sigmoid", lambda x: x.sigmoid(), "torch.nn.Sigmoid"),
        Softmax=_elementwise_module("Softmax", lambda x, dim: x.softmax(_softmax_dim(x, dim)), "torch.nn.Softmax",
                                    ("dim", None)),
        Softmax2d=_elementwise_module("Softmax2d", lambda x: x.softmax(-3), "torch.nn.Softmax2d: softmax over the "
                                      "channels of [N, C, H, W] or [C, H, W]"),
        LogSoftmax=_elementwise_module("LogSoftmax",
                                       lambda x, dim: x.log_softmax(_softmax_dim(x, dim, "log_softmax")),
                                       "torch.nn.LogSoftmax", ("dim", None)),
        Softmin=_elementwise_module("Softmin", lambda x, dim: X.softmin(x, _softmax_dim(x, dim, "softmin")),
                                    "torch.nn.Softmin", ("dim", None)),
        LeakyReLU=_elementwise_module("LeakyReLU", X.leaky_relu, "torch.nn.LeakyReLU", ("negative_slope", 0.01),
                                      ("inplace", False)),
        ELU=_elementwise_module("ELU", X.elu, "torch.nn.ELU", ("alpha", 1.0), ("inplace", False)),
        Softplus=_elementwise_module("Softplus", X.softplus, "torch.nn.Softplus", ("beta", 1.0), ("threshold", 20.0)),
        Mish=_elementwise_module("Mish", X.mish, "torch.nn.Mish", ("inplace", False)),
        Hardtanh=_elementwise_module("Hardtanh", X.hardtanh, "torch.nn.Hardtanh", ("min_val", -1.0),
                                     ("max_val", 1.0), ("inplace", False), check=_check_hardtanh),
        ReLU6=_elementwise_module("ReLU6", X.relu6, "torch.nn.ReLU6", ("inplace", False)),
        GLU=_elementwise_module("GLU", X.glu, "torch.nn.GLU", ("dim", -1)),
        LogSigmoid=_elementwise_module("LogSigmoid", X.logsigmoid, "torch.nn.LogSigmoid"),
        SELU=_elementwise_module("SELU", X.selu, "torch.nn.SELU", ("inplace", False)),
        CELU=_elementwise_module("CELU", X.celu, "torch.nn.CELU", ("alpha", 1.0), ("inplace", False)),
        Hardsigmoid=_elementwise_module("Hardsigmoid", X.hardsigmoid, "torch.nn.Hardsigmoid", ("inplace", False)),
        Hardswish=_elementwise_module("Hardswish", X.hardswish, "torch.nn.Hardswish", ("inplace", False)),
        Softsign=_elementwise_module("Softsign", X.softsign, "torch.nn.Softsign"),
        Threshold=_elementwise_module("Threshold", X.threshold, "torch.nn.Threshold", ("threshold", 0.0),
                                      ("value", 0.0), ("inplace", False)),
        Tanhshrink=_elementwise_module("Tanhshrink", X.tanhshrink, "torch.nn.Tanhshrink"),
        Softshrink=_elementwise_module("Softshrink", X.softshrink, "torch.nn.Softshrink", ("lambd", 0.5)),
        Hardshrink=_elementwise_module("Hardshrink", X.hardshrink, "torch.nn.Hardshrink", ("lambd", 0.5)),
        SoftMarginLoss=_loss_module("SoftMarginLoss", X.soft_margin_loss, "torch.nn.SoftMarginLoss",
                                    [("size_average", None), ("reduce", None), ("reduction", "mean")], ["reduction"]),
        HingeEmbeddingLoss=_loss_module("HingeEmbeddingLoss", X.hinge_embedding_loss, "torch.nn.HingeEmbeddingLoss",
                                        [("margin", 1.0), ("size_average", None), ("reduce", None),
                                         ("reduction", "mean")], ["margin", "reduction"]),
        Flatten=_elementwise_module("Flatten", lambda x, s, e: x.flatten(s, e), "torch.nn.Flatten",
                                    ("start_dim", 1), ("end_dim", -1)),
        Unflatten=_elementwise_module("Unflatten", lambda x, d, sizes: X.unflatten(x, d, sizes), "torch.nn.Unflatten",
                                      ("dim", 1), ("unflattened_size", ())),
        L1Loss=_loss_module("L1Loss", X.l1_loss, "torch.nn.L1Loss",
                            [("size_average", None), ("reduce", None), ("reduction", "mean")], ["reduction"]),
        SmoothL1Loss=_loss_module("SmoothL1Loss", X.smooth_l1_loss, "torch.nn.SmoothL1Loss",
                                  [("size_average", None), ("reduce", None), ("reduction", "mean"), ("beta", 1.0)],
                                  ["reduction", "beta"]),
        HuberLoss=_loss_module("HuberLoss", X.huber_loss, "torch.nn.HuberLoss",
                               [("reduction", "mean"), ("delta", 1.0)], ["reduction", "delta"]),
        BCELoss=_loss_module("BCELoss", X.binary_cross_entropy, "torch.nn.BCELoss",
                             [("weight", None), ("size_average", None), ("reduce", None), ("reduction", "mean")],
                             ["weight", "reduction"]),
        BCEWithLogitsLoss=_loss_module("BCEWithLogitsLoss", X.binary_cross_entropy_with_logits,
                                       "torch.nn.BCEWithLogitsLoss",
                                       [("weight", None), ("size_average", None), ("reduce", None),
                                        ("reduction", "mean"), ("pos_weight", None)],
                                       ["weight", "reduction", "pos_weight"]),
        NLLLoss=_loss_module("NLLLoss", X.nll_loss, "torch.nn.NLLLoss",
                             [("weight", None), ("size_average", None), ("ignore_index", -100), ("reduce", None),
                              ("reduction", "mean")], ["weight", "ignore_index", "reduction"]),
        KLDivLoss=_loss_module("KLDivLoss", X.kl_div, "torch.nn.KLDivLoss",
                               [("size_average", None), ("reduce", None), ("reduction", "mean"), ("log_target", False)],
                               ["reduction", "log_target"]),
    )


class _TwoInputModule(Module):
    """fn(x1, x2, *options) of two inputs and no parameters (CosineSimilarity)."""
    _fn, _fields = None, ()

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        values = dict(self._fields)
        values.update(zip([k for k, _ in self._fields], args))
        values.update(kwargs)
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def forward(self, x1, x2):
        return type(self)._fn(x1, x2, *[getattr(self, k) for k, _ in self._fields])


class PairwiseDistance(Module):
    """torch.nn.PairwiseDistance: ||x1 - x2 + eps||_p over the last dim; p is kept as .norm (torch's attribute,
    which scripts read; there is no .p)."""

    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        Module.__init__(self)
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return _extra().pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(_TwoInputModule):
    """torch.nn.CosineSimilarity along dim."""
    _fields = (("dim", 1), ("eps", 1e-8))
    _fn = staticmethod(lambda a, b, dim, eps: _extra().cosine_similarity(a, b, dim, eps))


def _extra():
    from .. import _extra as X
    return X


class _ThreeInputLoss(Module):
    """torch's losses of three inputs (MarginRankingLoss, CosineEmbeddingLoss, TripletMarginLoss)."""
    _fn_name, _fields = None, ()

    def __init__(self, *args, size_average=None, reduce=None, **kwargs):
        Module.__init__(self)
        values = dict(self._fields)
        values.update(zip([k for k, _ in self._fields], args))
        values.update(kwargs)
        if size_average is not None or reduce is not None:
            values["reduction"] = _reduction.legacy_get_string(size_average, reduce)
        for k, v in values.items():
            object.__setattr__(self, k, v)

    def forward(self, a, b, c):
        return getattr(_extra(), self._fn_name)(a, b, c, **{k: getattr(self, k) for k, _ in self._fields})


class MarginRankingLoss(_ThreeInputLoss):
    _fn_name, _fields = "margin_ranking_loss", (("margin", 0.0), ("reduction", "mean"))


class CosineEmbeddingLoss(_ThreeInputLoss):
    _fn_name, _fields = "cosine_embedding_loss", (("margin", 0.0), ("reduction", "mean"))


class TripletMarginLoss(_ThreeInputLoss):
    _fn_name = "triplet_margin_loss"
    _fields = (("margin", 1.0), ("p", 2.0), ("eps", 1e-6), ("swap", False), ("reduction", "mean"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.margin <= 0:
            raise ValueError("TripletMarginLoss: expected margin to be greater than 0, got %s instead" % self.margin)


class GaussianNLLLoss(Module):
    """torch.nn.GaussianNLLLoss(full, eps, reduction): forward(input, target, var)."""

    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__()
        self.full, self.eps, self.reduction = full, eps, reduction

    def forward(self, input, target, var):
        from .._composed import gaussian_nll_loss
        return gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class AlphaDropout(Module):
    """torch.nn.AlphaDropout(p): SELU's dropout in training mode, the identity in eval mode."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError("dropout probability has to be between 0 and 1, but got %s" % p)
        self.p, self.inplace = p, inplace

    def forward(self, x):
        from .._composed import alpha_dropout
        return alpha_dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self):
        return "p=%s, inplace=%s" % (self.p, self.inplace)


class PReLU(Module):
    """torch.nn.PReLU: max(0, x) + a * min(0, x) with a learnable a (num_parameters = 1 or the channels)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        self.weight = Parameter(_C._full([num_parameters], float(init), dtype or _C._get_default_dtype()))
        self.reset_parameters()  # torch's layers end __init__ so: a subclass's override runs

    def reset_parameters(self):
        with _C._GradMode(False):
            self.weight.fill_(float(self.init))

    def forward(self, x):
        return _extra().prelu(x, self.weight)

    def extra_repr(self):
        return "num_parameters=%d" % self.num_parameters


class GroupNorm(Module):
    """torch.nn.GroupNorm(num_groups, num_channels, eps, affine, bias): weight ones and bias zeros [C] (bias=False:
    the weight only)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        dt = dtype or _C._get_default_dtype()
        if affine:
            self.weight = Parameter(_C._full([num_channels], 1.0, dt))
        else:
            self.register_parameter("weight", None)
        if affine and bias:
            self.bias = Parameter(_C._full([num_channels], 0.0, dt))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        with _C._GradMode(False):
            if self.weight is not None:
                self.weight.fill_(1.0)
            if self.bias is not None:
                self.bias.zero_()

    def forward(self, x):
        return _extra().group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return "%d, %d, eps=%s, affine=%s, bias=%s" % (self.num_groups, self.num_channels, self.eps, self.affine,
                                                       self.bias is not None)


class EmbeddingBag(Module):
    """torch.nn.EmbeddingBag: a table [num_embeddings, embedding_dim] (normal init, as torch) reduced per
    bag by F.embedding_bag (mode "mean" by default)."""

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="mean", sparse=False, _weight=None, include_last_offset=False, padding_idx=None, device=None,
                 dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.mode = num_embeddings, embedding_dim, mode
        self.max_norm, self.norm_type, self.include_last_offset = max_norm, norm_type, include_last_offset
        self.padding_idx, self.sparse, self.scale_grad_by_freq = padding_idx, sparse, scale_grad_by_freq
        if sparse:
            raise NotImplementedError("EmbeddingBag: sparse gradients are not supported (tessel has no sparse tensors)")
        if _weight is not None:
            self.weight = Parameter(_weight)
        else:
            self.weight = Parameter(_C._full([num_embeddings, embedding_dim], 0.0, dtype or _C._get_default_dtype()))
            self.reset_parameters()

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                        mode="mean", sparse=False, include_last_offset=False, padding_idx=None):
        """torch's: a bag over the given 2-D table (its rows taken as they are; freeze: no gradient)."""
        assert embeddings.dim() == 2, "Embeddings parameter is expected to be 2-dimensional"
        rows, cols = embeddings.shape
        bag = cls(rows, cols, max_norm, norm_type, scale_grad_by_freq, mode, sparse, embeddings, include_last_offset,
                  padding_idx)
        bag.weight.requires_grad_(not freeze)
        return bag

    def reset_parameters(self):
        """N(0, 1), the padding row zero (torch's)."""
        from . import init
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with _C._GradMode(False):  # (assigned, not zero_() on the row: a sharded weight's row may be a copy)
                self.weight[self.padding_idx] = 0

    def forward(self, input, offsets=None, per_sample_weights=None):
        return functional.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                                        self.scale_grad_by_freq, self.mode, False, per_sample_weights,
                                        self.include_last_offset, self.padding_idx)

    def extra_repr(self):
        text = "%d, %d" % (self.num_embeddings, self.embedding_dim)
        if self.max_norm is not None:
            text += ", max_norm=%s" % self.max_norm
        if self.norm_type != 2:
            text += ", norm_type=%s" % self.norm_type
        text += ", mode=%r" % self.mode
        return text + (", padding_idx=%d" % self.padding_idx if self.padding_idx is not None else "")


class Bilinear(Module):
    """torch.nn.Bilinear: y = x1ᵀ·A·x2 + b with weight [out, in1, in2], bias [out], both uniform(±1/sqrt(in1))
    as torch's."""

    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        dtype = dtype or _dtypes.default_float()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(_C._full([out_features, in1_features, in2_features], 0.0, dtype))
        if bias:
            self.bias = Parameter(_C._full([out_features], 0.0, dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        import math
        from . import init
        bound = 1.0 / math.sqrt(self.in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return functional.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self):
        return "in1_features=%d, in2_features=%d, out_features=%d, bias=%s" % (
            self.in1_features, self.in2_features, self.out_features, self.bias is not None)


class CrossEntropyLoss(Module):
    """torch.nn.CrossEntropyLoss over class indices: logits [N, C] (or [C], or [N, C, d1, ...]), targets
    int64; optional class weights [C], a buffer as in torch (F.cross_entropy gives their formula)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                 label_smoothing=0.0):
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = _reduction.legacy_get_string(size_average, reduce)
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = int(ignore_index), reduction
        self.label_smoothing = float(label_smoothing)

    def forward(self, input, target):
        from .functional import cross_entropy
        return cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                             reduction=self.reduction, label_smoothing=self.label_smoothing)


class MSELoss(Module):
    """torch.nn.MSELoss: the mean (sum, none) of (input - target)²."""

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = _reduction.legacy_get_string(size_average, reduce)
        self.reduction = reduction

    def forward(self, input, target):
        from .functional import mse_loss
        return mse_loss(input, target, reduction=self.reduction)
