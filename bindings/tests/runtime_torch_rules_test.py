"""Runtime and profiler APIs as torch 2.15 has them (values and messages printed by torch 2.15 on a CPU-only
machine): the profiler's schedule and on_trace_ready calls, its ProfilerStep blocks, table columns and events,
the legacy autograd profiler, device equality, matmul precision, determinism switches, backends' flags, the
absent accelerators' modules, autocast's default dtypes, manual_seed's range, the default tensor type and jit's
serialization helpers."""
import os
import warnings

import pytest

import tessel
from tessel.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule


def _work():
    x = tessel.ones(8, 8)
    return (x @ x).relu().sum()


def _run_schedule(n_steps, **kw):
    calls = []
    with profile(schedule=schedule(**kw), on_trace_ready=lambda p: calls.append(p.step_num)) as p:
        for _ in range(n_steps):
            _work()
            p.step()
    return calls, sorted(e.key for e in p.key_averages())


def test_on_trace_ready_step_num_and_profiler_step_rows_as_torch():
    # torch: calls [4]; [4, 8]; exit mid-RECORD [3]; active=1 [1, 2, 3, 3]; skip_first=2 [3]
    calls, keys = _run_schedule(6, wait=1, warmup=1, active=2, repeat=1)
    assert calls == [4] and keys[0] == "ProfilerStep*"
    assert _run_schedule(10, wait=1, warmup=1, active=2, repeat=2)[0] == [4, 8]
    assert _run_schedule(3, wait=1, warmup=1, active=3, repeat=1)[0] == [3]
    calls, keys = _run_schedule(3, wait=0, warmup=0, active=1)
    assert calls == [1, 2, 3, 3] and keys == ["ProfilerStep*"]
    assert _run_schedule(4, wait=0, warmup=0, active=1, repeat=1, skip_first=2)[0] == [3]
    # exiting in a WARMUP step leaves an empty recording (torch: keys [])
    assert _run_schedule(5, wait=1, warmup=1, active=2) == ([4], [])


def test_on_trace_ready_without_schedule_is_called_once_at_stop(tmp_path):
    calls = []
    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=lambda p: calls.append(p.step_num)) as p:
        for _ in range(2):
            _work()
            p.step()
    assert calls == [2]
    assert "ProfilerStep*" not in {e.key for e in p.key_averages()}  # no step blocks without a schedule
    handler = tessel.profiler.tensorboard_trace_handler(str(tmp_path / "tb"), worker_name="w0")
    with profile(on_trace_ready=handler):
        _work()
    files = os.listdir(tmp_path / "tb")
    assert len(files) == 1 and files[0].startswith("w0.") and files[0].endswith(".pt.trace.json")


def test_schedule_skip_first_wait_and_activities_as_torch():
    actions = [schedule(wait=1, warmup=1, active=1, repeat=2, skip_first_wait=1)(i) for i in range(6)]
    A = ProfilerAction
    assert actions == [A.WARMUP, A.RECORD_AND_SAVE, A.NONE, A.WARMUP, A.RECORD_AND_SAVE, A.NONE]
    assert sorted(ProfilerActivity.__members__) == ['CPU', 'CUDA', 'HPU', 'MTIA', 'PrivateUse1', 'XPU']
    assert sorted(str(a) for a in tessel.profiler.supported_activities()) == ['ProfilerActivity.CPU']
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:  # torch: 'ok'
            _work()
    assert "sum" in {e.key for e in p.key_averages()}


def test_key_averages_memory_columns_sort_keys_and_events_as_torch():
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as p:
        with record_function("model_inference"):
            _work()
    ka = p.key_averages()
    for sort_by in ["self_cpu_memory_usage", "cpu_memory_usage", "flops", "cpu_time_total_str"]:
        ka.table(sort_by=sort_by, row_limit=5)
    with pytest.raises(AttributeError):
        ka.table(sort_by="bogus")
    header = [line for line in ka.table(sort_by="cpu_time_total").splitlines() if "Name" in line][0]
    assert "CPU time avg       CPU Mem  Self CPU Mem    # of Calls" in header  # torch's columns
    # torch's aten::mm row: "256 B  256 B  1"; tessel's op profiler records no memory: 0 B
    assert [line.split()[-5:] for line in ka.table().splitlines() if line.startswith("matmul")] == [
        ["0", "B", "0", "B", "1"]]
    row = [e for e in ka if e.key == "matmul"][0]
    types = {a: type(getattr(row, a)).__name__ for a in [
        "self_cpu_time_total_str", "cpu_time_total_str", "cpu_memory_usage", "self_cpu_memory_usage",
        "is_user_annotation", "node_id", "flops", "stack", "cpu_time_str", "device_time", "is_legacy", "is_async"]}
    assert types == {"self_cpu_time_total_str": "str", "cpu_time_total_str": "str", "cpu_memory_usage": "int",
                     "self_cpu_memory_usage": "int", "is_user_annotation": "bool", "node_id": "int",
                     "flops": "int", "stack": "list", "cpu_time_str": "str", "device_time": "float",
                     "is_legacy": "bool", "is_async": "bool"}
    assert row.use_device is None and ka.total_average().key == "Total"
    events = p.events()
    assert type(events).__name__ == "EventList" and type(events[0]).__name__ == "FunctionEvent"
    mm = [e for e in events if e.name == "matmul"]
    assert len(mm) == 1 and mm[0].key == "matmul" and mm[0].count == 1
    assert mm[0].cpu_time_total == pytest.approx(mm[0].time_range.elapsed_us())
    assert mm[0].cpu_parent.name == "model_inference"


def test_legacy_autograd_profiler_as_torch():
    legacy = tessel.autograd.profiler
    with legacy.profile(record_shapes=True, profile_memory=True, with_stack=True) as prof:
        with legacy.record_function("lbl"):
            _work()
    assert type(prof.function_events).__name__ == "EventList"
    assert prof.function_events.total_average().key == "Total"
    assert type(prof.self_cpu_time_total).__name__ == "float"
    assert "lbl" in {e.key for e in prof.key_averages()}
    with legacy.profile(enabled=False) as off:
        _work()
    assert off is None  # torch: 'NoneType' object has no attribute 'function_events'
    with pytest.raises(TypeError, match="unexpected keyword argument 'use_cuda'"):
        legacy.profile(use_cuda=True)
    with legacy.emit_nvtx():
        _work()


def test_device_equals_only_a_device_and_is_read_only():
    d = tessel.device("cpu")
    assert (d == "cpu", "cpu" == d, d in ["cpu"], tessel.zeros(2).device == "cpu") == (False, False, False, False)
    assert d == tessel.device("cpu") and d != "cpu"
    with pytest.raises(AttributeError, match="attribute 'type' of 'torch.device' objects is not writable"):
        d.type = "cuda"


@pytest.fixture
def _precision():
    saved = tessel.get_float32_matmul_precision()
    yield
    tessel.set_float32_matmul_precision(saved)


def test_matmul_precision_is_allow_tf32_and_a_bad_string_warns(_precision):
    matmul = tessel.backends.cuda.matmul
    tessel.set_float32_matmul_precision("high")
    assert matmul.allow_tf32 is True  # torch: allow_tf32 after high => True
    tessel.set_float32_matmul_precision("highest")
    assert matmul.allow_tf32 is False
    matmul.allow_tf32 = True
    assert tessel.get_float32_matmul_precision() == "high"
    matmul.allow_tf32 = False
    assert tessel.get_float32_matmul_precision() == "highest"
    with pytest.warns(UserWarning, match="HIGH is not one of 'highest', 'high', or 'medium'; the "
                                         "currentsetFloat32MatmulPrecision call has no effect."):
        assert tessel.set_float32_matmul_precision("HIGH") is None
    assert tessel.get_float32_matmul_precision() == "highest"


def test_deterministic_switches_as_torch():
    try:
        with pytest.raises(TypeError, match=r"_set_deterministic_algorithms\(\): argument 'mode' \(position 1\) "
                                            "must be bool, not str"):
            tessel.use_deterministic_algorithms("x")
        with pytest.raises(TypeError, match="must be bool, not int"):
            tessel.use_deterministic_algorithms(1)
        assert tessel.get_deterministic_debug_mode() == 0
        tessel.set_deterministic_debug_mode("warn")
        assert tessel.get_deterministic_debug_mode() == 1
        assert (tessel.are_deterministic_algorithms_enabled(),
                tessel.is_deterministic_algorithms_warn_only_enabled()) == (True, True)
        tessel.set_deterministic_debug_mode(2)
        assert tessel.get_deterministic_debug_mode() == 2
    finally:
        tessel.use_deterministic_algorithms(False)


def test_backends_flags_and_modules_as_torch():
    cudnn, mkldnn, oe = tessel.backends.cudnn, tessel.backends.mkldnn, tessel.backends.opt_einsum
    with cudnn.flags(enabled=False, benchmark=False, deterministic=False, allow_tf32=False):
        inside = (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32)
    assert (inside, (cudnn.enabled, cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32)) == (
        (False, False, False, False), (True, False, False, True))
    assert cudnn.flags().__enter__() is None and cudnn.benchmark_limit == 10
    with mkldnn.flags(enabled=False):
        assert mkldnn.enabled is False
    assert mkldnn.enabled is True and tessel.backends.mkl.is_available() is True
    assert (oe.is_available(), oe.enabled, oe.strategy) == (False, False, None)
    with oe.flags(enabled=False):
        assert oe.enabled is False
    with pytest.warns(FutureWarning, match=r"`torch.backends.cuda.sdp_kernel\(\)` is deprecated"):
        with tessel.backends.cuda.sdp_kernel(enable_flash=False):
            pass


def test_absent_accelerators_and_cpu_module_as_torch():
    assert (tessel.mps.is_available(), tessel.mps.device_count()) == (False, 0)
    assert (tessel.xpu.is_available(), tessel.xpu.device_count()) == (False, 0)
    assert (tessel.cpu.device_count(), tessel.cpu.synchronize(), tessel.cpu.current_device()) == (1, None, "cpu")
    cuda = tessel.cuda
    assert (cuda.get_rng_state_all(), cuda.set_rng_state_all([]), cuda.seed_all(), cuda.is_initialized()) == (
        [], None, None, False)
    start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
    assert repr(start) == "<torch.cuda.Event uninitialized>"
    start.record()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0


def test_autocast_dtype_seed_range_and_default_tensor_type_as_torch():
    assert tessel.get_autocast_dtype("cuda") == tessel.float16  # torch's default for CUDA
    with pytest.raises(ValueError, match="Overflow when unpacking long long"):
        tessel.manual_seed(2 ** 64)
    with pytest.raises(ValueError, match="Overflow when unpacking long long"):
        tessel.manual_seed(-2 ** 63 - 1)
    tessel.manual_seed(0)
    try:
        with pytest.warns(UserWarning, match=r"torch.set_default_tensor_type\(\) is deprecated as of PyTorch 2.1"):
            tessel.set_default_tensor_type(tessel.DoubleTensor)
        assert tessel.get_default_dtype() == tessel.float64
        with pytest.warns(UserWarning):
            tessel.set_default_tensor_type("torch.FloatTensor")
        assert tessel.get_default_dtype() == tessel.float32
        with pytest.warns(UserWarning), pytest.raises(TypeError, match="only floating-point types are supported"):
            tessel.set_default_tensor_type("torch.IntTensor")
    finally:
        tessel.set_default_dtype(tessel.float32)
    assert tessel.set_flush_denormal(True) is True and tessel.set_flush_denormal(False) is True
    assert tessel.is_warn_always_enabled() is False
    tessel.set_warn_always(True)
    assert tessel.is_warn_always_enabled() is True
    tessel.set_warn_always(False)


def test_inductor_config_and_jit_helpers(tmp_path):
    import tessel._inductor.config as config
    assert config.coordinate_descent_tuning is False  # torch's default
    config.some_flag_scripts_set = True
    assert tessel._inductor.config.some_flag_scripts_set is True
    del config.some_flag_scripts_set
    model = tessel.nn.Linear(3, 2)
    tessel.jit.save(tessel.jit.script(model), str(tmp_path / "m.pt"))
    loaded = tessel.jit.load(str(tmp_path / "m.pt"))
    x = tessel.ones(2, 3)
    assert loaded(x).tolist() == model(x).tolist()
    assert tessel.jit.freeze(model) is model and tessel.jit.optimize_for_inference(model) is model


def test_device_strings_and_ordinals_parse_as_torchs():
    # device(0) raised (torch: cuda:0), "xpu" / "lazy" / "privateuseone" were refused, and "cuda:-1", "cuda:01",
    # "cuda: 1" and device("cpu", -1) were accepted; "cpu:x" was a ValueError
    ok = {(0,): ("cuda", 0), ("xpu",): ("xpu", None), ("privateuseone",): ("privateuseone", None),
          ("xla:1",): ("xla", 1), ("cuda:10",): ("cuda", 10), ("cpu:0",): ("cpu", 0), ("cuda", 1): ("cuda", 1)}
    for args, (kind, index) in ok.items():
        d = tessel.device(*args)
        assert (d.type, d.index) == (kind, index), args
    refused = {("cuda:-1",): "Invalid device string: 'cuda:-1'", ("cuda: 1",): "Invalid device string: 'cuda: 1'",
               ("cuda:01",): "Invalid device string: 'cuda:01'", ("cpu:x",): "Invalid device string: 'cpu:x'",
               ("cuda:",): "Invalid device string: 'cuda:'", ("cpu", -1): "Device index must not be negative",
               (-1,): "Device index must not be negative", ("",): "Device string must not be empty",
               ("cpu:1", 0): "type (string) must not include an index because index was passed explicitly: cpu:1",
               ("foo",): "Expected one of cpu, cuda, ipu, xpu, mkldnn, opengl, opencl, ideep, hip, ve, fpga, maia, "
                         "xla, lazy, vulkan, mps, meta, hpu, mtia, privateuseone device type at start of device "
                         "string: foo"}
    for args, message in refused.items():
        with pytest.raises(RuntimeError) as e:
            tessel.device(*args)
        assert str(e.value) == message, args
    with pytest.raises(NotImplementedError, match="device 'cuda:0' is not available"):  # naming is fine, using not
        tessel.zeros(2, device=0)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
