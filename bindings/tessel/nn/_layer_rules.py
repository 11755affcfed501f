"""torch's Python-level rules on the C++ layers (nn_py.cc binds them): what torch's own Python classes check or
register that the bindings do not, kept here so no C++ needs rebuilding for them.

- RMSNorm(elementwise_affine=False).weight is None: torch registers the parameter as None (LayerNorm's bindings
  do the same in C++).
- Embedding: torch's AssertionErrors for a padding_idx outside the table and for a from_pretrained table that is
  not 2-D; from_pretrained builds `cls`, so a subclass's from_pretrained gives the subclass.
"""
from .. import _C


def _parameter_or_none(name):
    def get(self):
        from .modules import _getattr
        try:
            return _getattr(self, name)
        except AttributeError:  # registered as None in torch: reads None
            return None
    return property(get, doc="torch's %s: the parameter, or None when the layer has none" % name)


def _check_padding_idx(num_embeddings, padding_idx):
    if padding_idx is None or isinstance(num_embeddings, bool) or not isinstance(num_embeddings, int):
        return
    if padding_idx > 0 and padding_idx >= num_embeddings or padding_idx < 0 and padding_idx < -num_embeddings:
        raise AssertionError("Padding_idx must be within num_embeddings")


def _embedding_init(original):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, *args, **kwargs):
        _check_padding_idx(num_embeddings, padding_idx)
        original(self, num_embeddings, embedding_dim, padding_idx, *args, **kwargs)
    __init__.__doc__, __init__.__wrapped__ = original.__doc__, original
    return __init__


def _from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                     scale_grad_by_freq=False, sparse=False):
    """torch.nn.Embedding.from_pretrained: a `cls` holding `embeddings` [rows, dim] as its weight (no copy),
    frozen unless freeze=False."""
    if embeddings.dim() != 2:
        raise AssertionError("Embeddings parameter is expected to be 2-dimensional")
    rows, cols = embeddings.shape
    return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, _weight=embeddings,
               _freeze=freeze)


def install():
    _C.RMSNorm.weight = _parameter_or_none("weight")
    _C.Embedding.__init__ = _embedding_init(_C.Embedding.__init__)
    _C.Embedding.from_pretrained = classmethod(_from_pretrained)
