"""tessel.nn: modules with torch.nn's names. ``Module`` is subclassable in Python (its C++ side is a
trampoline over nn::Module, so fully_shard acts on Python modules as on C++ ones); Linear, Embedding,
LayerNorm and RMSNorm are the C++ layers (initialized as torch's: Linear uniform on ±1/sqrt(in_features),
Embedding N(0, 1); ``init_std=`` asks for the GPT-2 style N(0, init_std) weights instead; reset_parameters()
as torch's); containers and activations are Python modules.

    import tessel.nn as nn
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.fc = nn.LayerNorm(16), nn.Linear(16, 16)
        def forward(self, x):
            return x + self.fc(self.norm(x))
"""
from .. import _C
from . import functional, init, utils  # noqa: F401
from .modules import Buffer, Module, Parameter, RemovableHandle  # noqa: F401
from ._layers import (  # noqa: F401
    AlphaDropout,
    Bilinear,
    CosineEmbeddingLoss,
    CosineSimilarity,
    CrossEntropyLoss,
    Dropout,
    Dropout1d,
    Dropout2d,
    Dropout3d,
    EmbeddingBag,
    GaussianNLLLoss,
    GELU,
    GroupNorm,
    Identity,
    MarginRankingLoss,
    MSELoss,
    PairwiseDistance,
    PReLU,
    ReLU,
    SiLU,
    Tanh,
    TripletMarginLoss,
)
from ._containers import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential  # noqa: F401
from ._transformer import (  # noqa: F401
    MultiheadAttention, Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer)

Linear = _C.Linear
Embedding = _C.Embedding
LayerNorm = _C.LayerNorm
RMSNorm = _C.RMSNorm
from ._copy import _record_constructor_args  # noqa: E402
for _layer in (Linear, Embedding, LayerNorm, RMSNorm):
    _record_constructor_args(_layer)  # copy.deepcopy rebuilds them from these
from ._layer_rules import install as _install_layer_rules  # noqa: E402
_install_layer_rules()  # RMSNorm's None weight, Embedding's padding_idx / from_pretrained assertions
GPT = _C.GPT
GPTConfig = _C.GPTConfig
from . import parallel  # noqa: E402,F401 (torch.nn.parallel.DistributedDataParallel)
from . import attention  # noqa: E402,F401 (torch.nn.attention.SDPBackend / sdpa_kernel, as torch.nn imports it)
from ._layers import _make_extra_modules  # noqa: E402
globals().update(_make_extra_modules())  # Sigmoid, Softmax, LeakyReLU, ..., BCEWithLogitsLoss, NLLLoss, ...
from ._conv_modules import make_modules as _make_conv_modules  # noqa: E402
globals().update(_make_conv_modules())  # Conv1d/2d/3d, ConvTranspose*, MaxPool*, AvgPool*, Adaptive*, BatchNorm*
from ._rnn import MODULES as _RNN_MODULES  # noqa: E402
globals().update(_RNN_MODULES)  # RNN, LSTM, GRU and their cells
from . import _resample  # noqa: E402
globals().update(_resample.make_modules())  # ZeroPad*/ReflectionPad*/..., Upsample, PixelShuffle
functional.__dict__.update(functional._wrap_composed(_resample.FUNCTIONAL))  # F.pad (all modes), F.interpolate, ...
from . import _grid_sample  # noqa: E402
functional.__dict__.update(functional._wrap_composed(_grid_sample.FUNCTIONAL))  # F.affine_grid, F.grid_sample
from . import _ctc  # noqa: E402
functional.__dict__.update(functional._wrap_composed(_ctc.FUNCTIONAL))  # F.ctc_loss
globals().update(_ctc.MODULES)  # CTCLoss
from . import _pickle  # noqa: E402,F401 (pickling whole modules: torch.save(model, f))
from . import _more_modules  # noqa: E402
globals().update(_more_modules.MODULES)  # ChannelShuffle, MaxUnpool*, LazyLinear, DataParallel, ...
globals().update(_more_modules._lazy_modules(globals()))  # LazyConv*d, LazyConvTranspose*d, LazyBatchNorm*d
functional.__dict__.update(functional._wrap_composed(_more_modules.FUNCTIONAL))  # F.channel_shuffle, F.max_unpool*, ...
from . import _linear_cross_entropy  # noqa: E402
globals().update(_linear_cross_entropy.MODULES)  # LinearCrossEntropyLoss, LinearCrossEntropyOptions
functional.__dict__.update(functional._wrap_composed(_linear_cross_entropy.FUNCTIONAL))  # F.linear_cross_entropy
from . import _adaptive  # noqa: E402
globals().update(_adaptive.MODULES)  # AdaptiveLogSoftmaxWithLoss
from . import _fractional_pool  # noqa: E402
globals().update(_fractional_pool.MODULES)  # FractionalMaxPool2d / 3d
functional.__dict__.update(functional._wrap_composed(_fractional_pool.FUNCTIONAL))  # F.fractional_max_pool*d


def _name_made_classes(namespace):
    """Classes the factories above make (Conv2d, BatchNorm2d, MaxPool2d, BCELoss, ReflectionPad2d, ...) carry the
    factory's module and a local name, so pickle (torch.save(model)) could not find them: each is named here, where
    scripts reach it, as tessel.nn.<Name>."""
    import sys as _sys
    for name, obj in list(namespace.items()):
        if not isinstance(obj, type) or name.startswith("_"):
            continue
        found = _sys.modules.get(obj.__module__)
        for part in obj.__qualname__.split("."):
            found = getattr(found, part, None)
        if found is not obj and obj.__name__ == name:
            obj.__module__, obj.__qualname__ = __name__, name


_name_made_classes(globals())
