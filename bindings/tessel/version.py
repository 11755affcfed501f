"""torch.version: the torch API level tessel's Python face mirrors (PyTorch 2.15: its names, semantics and
messages), with tessel's own version as the local label, so a ported script's `torch.__version__` checks take the
2.15 paths (`tessel.__version__ >= "2.1"`, `packaging.version.parse(tessel.__version__)`); `cuda` is None as in a
CPU build of torch (tessel's Python face runs on the host; tessel.cuda.is_available() is False)."""
import itertools

__all__ = ["__version__", "debug", "cuda", "git_version", "hip", "rocm", "xpu", "tessel"]

tessel = "0.1.0"  # the package's own version (bindings/packaging/tessel_build.py)


class TorchVersion(str):
    """A version string that orders against strings and tuples by its release numbers, as torch's TorchVersion
    (`"2.15.0+tessel.0.1.0" >= "2.9"` and `>= (2, 1)` hold; a plain str compares letter by letter)."""

    @staticmethod
    def _release(v):
        if isinstance(v, tuple):
            return tuple(int(x) for x in v)
        parts = []
        for piece in str(v).split("+")[0].split("."):
            digits = "".join(itertools.takewhile(str.isdigit, piece))
            if not digits:
                break
            parts.append(int(digits))
            if digits != piece:  # a pre-release suffix ("0a0"): the number is the release's last
                break
        return tuple(parts)

    def _order(self, other):
        a, b = self._release(self), self._release(other)
        n = max(len(a), len(b))
        a, b = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
        return (a > b) - (a < b)

    def __lt__(self, other):
        return self._order(other) < 0

    def __le__(self, other):
        return self._order(other) <= 0

    def __gt__(self, other):
        return self._order(other) > 0

    def __ge__(self, other):
        return self._order(other) >= 0

    __eq__ = str.__eq__
    __hash__ = str.__hash__


__version__ = TorchVersion("2.15.0+tessel." + tessel)
debug = False
cuda = None
hip = None
rocm = None
xpu = None
git_version = "unknown"
