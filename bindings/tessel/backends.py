"""torch.backends for ported scripts: the flags training scripts set (cudnn.benchmark / deterministic /
allow_tf32, cuda.matmul.allow_tf32, ...) and the availability checks of device selection code
(mps.is_available(), cudnn.is_available()). Each flag is kept and reads back as set. None changes
tessel's numerics: its CPU float32 GEMMs never use TF32 (allowing it permits, not requires, lower
precision), its convolutions are not cuDNN's, and its kernels are deterministic whatever the flags say
(tessel.use_deterministic_algorithms)."""
import types as _types


def _flags(name, doc, **values):
    m = _types.ModuleType("tessel.backends." + name, doc)
    m.__dict__.update(values)
    return m


cudnn = _flags("cudnn", "torch.backends.cudnn: cuDNN is not what tessel calls; the flags are kept.",
               enabled=True, benchmark=False, deterministic=False, allow_tf32=True,
               is_available=lambda: False, version=lambda: None)
cuda = _flags("cuda", "torch.backends.cuda: matmul flags (kept) and scaled-dot-product backends.",
              is_built=lambda: False)  # as tessel.cuda.is_available(): the Python face computes on the CPU
cuda.matmul = _flags("cuda.matmul", "torch.backends.cuda.matmul", allow_tf32=False,
                     allow_bf16_reduced_precision_reduction=True, allow_fp16_reduced_precision_reduction=True)
_sdp = {"flash": True, "mem_efficient": True, "math": True, "cudnn": True}
for _kind in list(_sdp):
    setattr(cuda, "enable_%s_sdp" % _kind, (lambda k: lambda enabled: _sdp.__setitem__(k, bool(enabled)))(_kind))
    setattr(cuda, "%s_sdp_enabled" % _kind, (lambda k: lambda: _sdp[k])(_kind))
mps = _flags("mps", "torch.backends.mps: no Apple GPU here.", is_available=lambda: False, is_built=lambda: False)
mkldnn = _flags("mkldnn", "torch.backends.mkldnn: tessel's float32 and bfloat16 GEMMs run through oneDNN.",
                enabled=True, is_available=lambda: True)
openmp = _flags("openmp", "torch.backends.openmp", is_available=lambda: True)


def _cpu_capability():
    from . import _C
    return _C._cpu_capability()


cpu = _flags("cpu", "torch.backends.cpu: get_cpu_capability() names the vector ISA tessel's hand-written kernels "
             "run: 'AVX512' where the CPU has AVX-512 F/VL/DQ/BW, else 'AVX2' (the build's x86-64-v3 baseline).",
             get_cpu_capability=_cpu_capability)
