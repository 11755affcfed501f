"""torch.return_types: the named tuples that max(dim), sort, topk, median, linalg.svd, ... return.

Each is a tuple subclass with named fields (r.values, r.indices; `values, indices = r` unpacks; pickles by
name) whose repr is torch's structseq form, one field per line:

    tessel.return_types.max(
    values=tensor([2., 4.]),
    indices=tensor([1, 1]))

Example: tessel.tensor([1., 3.]).max(0).indices   # tensor(1)
"""
import collections

__all__ = []


def _repr(self):
    return "%s.%s(\n%s)" % (__name__, type(self).__name__,
                            ",\n".join("%s=%r" % (f, v) for f, v in zip(self._fields, self)))


def _structseq(name, fields):
    """A named tuple class tessel.return_types.<name> with torch's repr, registered in this module."""
    cls = type(name, (collections.namedtuple(name, fields),),
               {"__slots__": (), "__module__": __name__, "__qualname__": name, "__repr__": _repr, "__str__": _repr})
    globals()[name] = cls
    __all__.append(name)
    return cls


for _name in ("max", "min", "sort", "topk", "kthvalue", "median", "nanmedian", "mode", "cummax", "cummin"):
    _structseq(_name, ["values", "indices"])
_structseq("aminmax", ["min", "max"])
_structseq("frexp", ["mantissa", "exponent"])
_structseq("histogram", ["hist", "bin_edges"])
_structseq("slogdet", ["sign", "logabsdet"])
_structseq("linalg_slogdet", ["sign", "logabsdet"])
_structseq("svd", ["U", "S", "V"])
_structseq("linalg_svd", ["U", "S", "Vh"])
_structseq("linalg_qr", ["Q", "R"])
_structseq("linalg_eigh", ["eigenvalues", "eigenvectors"])
_structseq("linalg_eig", ["eigenvalues", "eigenvectors"])
_structseq("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])
_structseq("linalg_inv_ex", ["inverse", "info"])
_structseq("linalg_cholesky_ex", ["L", "info"])
_structseq("linalg_solve_ex", ["result", "info"])
_structseq("linalg_lu_factor", ["LU", "pivots"])
_structseq("linalg_lu_factor_ex", ["LU", "pivots", "info"])
_structseq("linalg_lu", ["P", "L", "U"])
_structseq("lu_unpack", ["P", "L", "U"])
_structseq("triangular_solve", ["solution", "cloned_coefficient"])
