"""Writes torch_saved.pt, the fixture of tensor_test's torch-file test: a file torch.save wrote (zip format,
torch 2.15 from PyPI), with values the test can state without torch. Needs PyTorch (not a tessel
dependency): $TESSEL_TORCH_PYTHON bindings/tests/data/make_torch_saved.py"""
import collections
import os

import torch

base = torch.arange(10.0)
hf_param = torch.nn.Parameter(torch.ones(2))
hf_param._is_hf_initialized = True
sd = {
    "model": collections.OrderedDict(weight=torch.arange(6.0).reshape(2, 3) / 10, bias=torch.tensor([0.5, -0.5])),
    "step": 7,
    "name": "ckpt",
    "half": torch.arange(4, dtype=torch.float16) / 4,
    "bf16": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
    "ints_t": torch.tensor([[1, 2], [3, 4]]).t(),  # non-contiguous
    "param": torch.nn.Parameter(torch.ones(2)),
    "flags": torch.tensor([True, False]),
    "strided": base[2:8:2],  # a view into a shared storage, with an offset
    "whole": base,
    "f64": torch.tensor([1e-300, 2.0], dtype=torch.float64),
    "i32": torch.tensor([-7], dtype=torch.int32),
    "u8": torch.tensor([255], dtype=torch.uint8),
    "list": [torch.zeros(1), (1, 2.5)],
    "scalar": torch.tensor(3.5),  # 0-d
    "scale": torch.nn.Parameter(torch.tensor(2.0)),  # a 0-d parameter (a learnable temperature)
    "tied": base,  # the same storage as "whole" and "strided": one storage in the file, shared after loading
    "cplx": torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64),
    "bf16_0d": torch.tensor(1.5, dtype=torch.bfloat16),
    "hf_param": hf_param,  # a Parameter with an attribute: torch writes _rebuild_parameter_with_state
    "meta": {"dtype": torch.bfloat16, "device": torch.device("cpu"), "shape": torch.Size([2, 3]),
             "counter": collections.Counter(a=2), "set": {1, 2}, "complex": 1 + 2j, "bytes": bytearray(b"ab")},
}
torch.save(sd, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_saved.pt"))
