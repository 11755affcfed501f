"""torch.backends for ported scripts: the flags training scripts set (cudnn.benchmark / deterministic /
allow_tf32, cuda.matmul.allow_tf32, ...) and the availability checks of device selection code
(mps.is_available(), cudnn.is_available()). Each flag is kept and reads back as set; the scaled-dot-product
ones (cuda.enable_math_sdp, ..., nn.attention.sdpa_kernel) also decide whether attention can run, as on
torch's CPU. None changes tessel's numerics: its CPU float32 GEMMs never use TF32 (allowing it permits, not
requires, lower precision), its convolutions are not cuDNN's, and its kernels are deterministic whatever the
flags say (tessel.use_deterministic_algorithms)."""
import contextlib as _contextlib
import sys as _sys
import types as _types
import warnings as _warnings


def _flags(name, doc, **values):
    m = _types.ModuleType("tessel.backends." + name, doc)
    m.__dict__.update(values)
    _sys.modules[m.__name__] = m
    return m


def _flags_context(module, *names):
    """torch's <backend>.flags(...): sets the named flags for a `with` block, then restores them."""
    @_contextlib.contextmanager
    def flags(*args, **kwargs):
        values = dict(zip(names, args))
        values.update(kwargs)
        saved = {k: getattr(module, k) for k in values}
        for k, v in values.items():
            if v is not None or module is not opt_einsum:  # opt_einsum.flags: None leaves a flag as it is
                setattr(module, k, v)
        try:
            yield
        finally:
            for k, v in saved.items():
                setattr(module, k, v)
    return flags


cudnn = _flags("cudnn", "torch.backends.cudnn: cuDNN is not what tessel calls; the flags are kept.",
               enabled=True, benchmark=False, benchmark_limit=10, deterministic=False, allow_tf32=True,
               is_available=lambda: False, version=lambda: None, is_acceptable=lambda tensor: False)
cudnn.flags = _flags_context(cudnn, "enabled", "benchmark", "benchmark_limit", "deterministic", "allow_tf32")
cuda = _flags("cuda", "torch.backends.cuda: matmul flags (kept) and scaled-dot-product backends (their flags decide "
              "whether scaled_dot_product_attention can run, as on torch's CPU: math or flash must be enabled).",
              is_built=lambda: False)  # as tessel.cuda.is_available(): the Python face computes on the CPU


class _Matmul(_types.ModuleType):
    """torch.backends.cuda.matmul: allow_tf32 is torch.get_float32_matmul_precision() != "highest"; setting it
    sets the precision to "high" or "highest", as torch's."""

    @property
    def allow_tf32(self):
        from . import get_float32_matmul_precision
        return get_float32_matmul_precision() != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value):
        from . import set_float32_matmul_precision
        set_float32_matmul_precision("high" if value else "highest")


cuda.matmul = _Matmul("tessel.backends.cuda.matmul", "torch.backends.cuda.matmul")
cuda.matmul.allow_bf16_reduced_precision_reduction = cuda.matmul.allow_fp16_reduced_precision_reduction = True


def _sdp_kernel(enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
    """torch.backends.cuda.sdp_kernel (deprecated in torch): tessel's attention picks its own kernel."""
    _warnings.warn("`torch.backends.cuda.sdp_kernel()` is deprecated. In the future, this context manager will be "
                   "removed. Please see `torch.nn.attention.sdpa_kernel()` for the new context manager, with "
                   "updated signature.", FutureWarning, stacklevel=2)
    return _contextlib.nullcontext()


cuda.sdp_kernel = _sdp_kernel
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}
for _kind in list(_sdp):
    setattr(cuda, "enable_%s_sdp" % _kind, (lambda k: lambda enabled: _sdp.__setitem__(k, bool(enabled)))(_kind))
    setattr(cuda, "%s_sdp_enabled" % _kind, (lambda k: lambda: _sdp[k])(_kind))


class _SDPAParams:
    """torch.backends.cuda.SDPAParams: the arguments of one attention call, for the can_use_* checks."""

    def __init__(self, query, key, value, attn_mask, dropout, is_causal, enable_gqa=False):
        self.query, self.key, self.value, self.attn_mask = query, key, value, attn_mask
        self.dropout, self.is_causal, self.enable_gqa = dropout, is_causal, enable_gqa


def _no_cuda_kernel(name):
    def check(params, debug=False):
        """False: tessel's Python face computes on the CPU, where torch's CUDA attention kernels cannot run."""
        return False
    check.__name__ = check.__qualname__ = name
    return check


cuda.SDPAParams = _SDPAParams
for _kernel in ("flash", "efficient", "cudnn"):
    setattr(cuda, "can_use_%s_attention" % _kernel, _no_cuda_kernel("can_use_%s_attention" % _kernel))
cuda.is_flash_attention_available = lambda: False
mps = _flags("mps", "torch.backends.mps: no Apple GPU here.", is_available=lambda: False, is_built=lambda: False)
mkldnn = _flags("mkldnn", "torch.backends.mkldnn: tessel's float32 and bfloat16 GEMMs run through oneDNN.",
                enabled=True, deterministic=False, allow_tf32=True, is_available=lambda: True)
mkldnn.flags = _flags_context(mkldnn, "enabled", "deterministic", "allow_tf32")
openmp = _flags("openmp", "torch.backends.openmp", is_available=lambda: True)
mkl = _flags("mkl", "torch.backends.mkl: tessel's CPU kernels use oneDNN / MKL.", is_available=lambda: True)
opt_einsum = _flags("opt_einsum", "torch.backends.opt_einsum: the opt_einsum package is not used by tessel.einsum "
                    "(it contracts left to right).", is_available=lambda: False, enabled=False, strategy=None)
opt_einsum.flags = _flags_context(opt_einsum, "enabled", "strategy")


def _cpu_capability():
    from . import _C
    return _C._cpu_capability()


cpu = _flags("cpu", "torch.backends.cpu: get_cpu_capability() names the vector ISA tessel's hand-written kernels "
             "run: 'AVX512' where the CPU has AVX-512 F/VL/DQ/BW, else 'AVX2' (the build's x86-64-v3 baseline).",
             get_cpu_capability=_cpu_capability)
