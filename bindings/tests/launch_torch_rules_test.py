"""Launching and process-group rules as torch 2.15 follows them, from a side-by-side sweep; the expected values and
messages are what torch printed. The default process group is the process's (a thread the script starts sees it;
run_ranks' rank threads keep their own); init_process_group(rank=, world_size=) leaves os.environ alone (a later
init on another port, or the processes it spawns, read the old values) and checks its arguments as torch does;
stores refuse torch's wrong argument types, have multi_get / multi_set / append, and raise DistNetworkError when
they cannot bind or connect; a FileStore's last user removes it; mp.spawn reports sys.exit codes and
KeyboardInterrupt as torch's, its exceptions carry msg / error_pid and pickle, ProcessContext.join takes
grace_period; the launcher's main raises ChildFailedError listing every failed rank, parse_args /
config_from_args / run exist, the legacy tessel.distributed.launch passes --local-rank; elastic_launch names each
failed rank of a command and restarts a function."""
import datetime
import gc
import os
import pickle
import socket
import sys
import textwrap
import threading
import warnings

import pytest

import tessel
import tessel.distributed as dist
import tessel.multiprocessing as mp
from tessel.distributed import run as torchrun
from tessel.distributed.elastic.multiprocessing.errors import ChildFailedError
from tessel.distributed.launcher.api import LaunchConfig, elastic_launch

TIMEOUT = datetime.timedelta(seconds=10)
ENV_KEYS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "TESSEL_COMM_TIMEOUT_MS")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tcp_init(backend="gloo", **kwargs):
    kwargs.setdefault("timeout", TIMEOUT)
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % free_port(), rank=0, world_size=1, **kwargs)


@pytest.fixture
def clean_env(monkeypatch):
    """No launcher variables while the test runs, and none it leaks after it."""
    for k in ENV_KEYS:
        monkeypatch.delenv(k, raising=False)


def test_the_default_group_is_the_processs_and_run_ranks_threads_keep_their_own(clean_env):
    tcp_init()
    try:
        seen = {}
        t = threading.Thread(target=lambda: seen.update(init=dist.is_initialized(), rank=dist.get_rank(),
                                                        size=dist.get_world_size(), backend=dist.get_backend()))
        t.start()
        t.join()
        assert seen == {"init": True, "rank": 0, "size": 1, "backend": "gloo"}  # torch's, from a plain thread
        ranks = {}

        def rank_fn(world):
            dist.init_process_group(timeout=TIMEOUT)
            ranks[int(world.rank)] = (dist.get_rank(), dist.get_world_size())
            dist.destroy_process_group()
        tessel.run_ranks(2, rank_fn)
        assert ranks == {0: (0, 2), 1: (1, 2)}
        assert (dist.is_initialized(), dist.get_world_size()) == (True, 1)  # the process's group is untouched
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_init_with_rank_and_world_size_leaves_the_environment_and_a_new_port_works(clean_env):
    port = free_port()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1, timeout=TIMEOUT)
    during = {k: os.environ.get(k) for k in ENV_KEYS}
    dist.destroy_process_group()
    assert during == dict.fromkeys(ENV_KEYS)  # torch's: nothing written
    with socket.socket() as blocker:  # the first port now belongs to someone else
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        tcp_init()
        try:
            t = tessel.ones(2)
            dist.all_reduce(t)
            assert t.tolist() == [1.0, 1.0]  # torch's
        finally:
            dist.destroy_process_group()


def test_init_process_group_checks_its_arguments_as_torch(clean_env):
    url = "tcp://127.0.0.1:%d" % free_port()
    with pytest.raises(TypeError, match="Expected timeout argument to be of type datetime.timedelta, got 30"):
        dist.init_process_group("gloo", init_method=url, rank=0, world_size=1, timeout=30)
    with pytest.raises(AssertionError, match="Cannot specify both init_method and store."):
        dist.init_process_group("gloo", init_method=url, store=dist.HashStore(), rank=0, world_size=1)
    with pytest.raises(AssertionError, match="world_size must be positive if using store"):
        dist.init_process_group("gloo", store=dist.HashStore())
    with pytest.raises(AssertionError, match="rank must be non-negative if using store"):
        dist.init_process_group("gloo", store=dist.HashStore(), world_size=1)
    with pytest.raises(ValueError, match="using tcp:// rendezvous: rank parameter missing"):
        dist.init_process_group("gloo", init_method=url)
    with pytest.raises(ValueError, match="using tcp:// rendezvous: world size parameter missing"):
        dist.init_process_group("gloo", init_method=url, rank=0)
    with pytest.raises(ValueError, match="device_id parameter must be a device with a valid index, e.g. cpu:0"):
        tcp_init(device_id=tessel.device("cpu"))
    with pytest.raises(AssertionError, match="Process group cannot be None"):
        dist.destroy_process_group()
    assert not dist.is_initialized()
    tcp_init("GLOO")
    try:
        assert dist.get_backend() == "gloo"  # torch's Backend() lower-cases it
    finally:
        dist.destroy_process_group()


def test_a_tcp_rendezvous_missing_a_rank_fails_with_torchs_store_error(clean_env):
    with pytest.raises(dist.DistStoreError, match=r"waiting for clients\. 1/2 clients joined\.") as failed:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % free_port(), rank=0, world_size=2,
                                timeout=datetime.timedelta(seconds=1))
    assert type(failed.value) is dist.DistStoreError and not dist.is_initialized()


def test_stores_refuse_the_argument_types_torchs_bindings_refuse():
    s = dist.HashStore()
    with pytest.raises(TypeError, match=r"set\(\): incompatible function arguments"):
        s.set("c", 5)
    with pytest.raises(TypeError, match=r"wait\(\): incompatible function arguments"):
        s.wait("b")
    with pytest.raises(TypeError, match=r"check\(\): incompatible function arguments"):
        s.check("b")
    with pytest.raises(TypeError, match=r"add\(\): incompatible function arguments"):
        s.add("c", "1")
    with pytest.raises(TypeError, match=r"set_timeout\(\): incompatible function arguments"):
        s.set_timeout(3)
    with pytest.raises(TypeError, match=r"__init__\(\): incompatible constructor arguments"):
        dist.TCPStore("127.0.0.1", 0, 1, True, timeout=5)
    s.set("k", bytearray(b"z"))
    assert (s.get(b"k"), s.check(("k",)), s.num_keys()) == (b"z", True, 1)  # torch's


def test_stores_have_torchs_extended_api():
    master = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TIMEOUT)
    for s in (dist.HashStore(), master, dist.PrefixStore("pre", dist.HashStore())):
        s.multi_set(["m1", "m2"], ["v1", b"v2"])
        s.append("ap", "x")
        s.append("ap", "y")
        assert (s.multi_get(["m1", "m2"]), s.get("ap"), s.has_extended_api()) == ([b"v1", b"v2"], b"xy", True)
    assert (master.libuvBackend, dist.TCPStore("127.0.0.1", 0, 1, True, use_libuv=False).libuvBackend) == (True,
                                                                                                           False)
    assert dist.Store().timeout == datetime.timedelta(seconds=300)  # torch's base store: subclassed in Python


def test_tcp_stores_that_cannot_bind_or_connect_raise_dist_network_error():
    port = free_port()
    with pytest.raises(dist.DistNetworkError, match=r"timed out after 1000ms while trying to connect to "
                                                    r"\(127\.0\.0\.1, %d\)" % port) as failed:
        dist.TCPStore("127.0.0.1", port, 1, False, timeout=datetime.timedelta(seconds=1))
    assert not isinstance(failed.value, dist.DistStoreError)
    master = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=TIMEOUT)
    with pytest.raises(dist.DistNetworkError, match="failed to listen on any local network address. port: %d"
                                                    % master.port):
        dist.TCPStore("127.0.0.1", master.port, 1, True, timeout=datetime.timedelta(seconds=1))
    with pytest.raises(dist.DistStoreError, match=r"seconds waiting for clients\. 1/2 clients joined\."):
        dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=1))


def test_a_file_stores_last_user_removes_it(tmp_path):
    path = str(tmp_path / "store")
    s = dist.FileStore(path, 1)
    s.set("done", "1")
    assert (s.num_keys(), s.delete_key("never_set"), s.has_extended_api()) == (2, True, False)  # torch's
    del s
    gc.collect()
    again = dist.FileStore(path, 1)
    assert (again.check(["done"]), again.num_keys()) == (False, 1)  # torch's: the last run's keys are gone


def exit_with(i, codes):
    sys.exit(codes[i])


def interrupted(i):
    raise KeyboardInterrupt


def test_spawn_reports_sys_exit_codes_and_keyboard_interrupts_as_torch():
    with pytest.raises(mp.ProcessExitedException, match="process 1 terminated with exit code 3") as failed:
        mp.spawn(exit_with, args=((0, 3),), nprocs=2)  # sys.exit(0) is a success, sys.exit(3) a failure
    e = failed.value
    assert (e.error_index, e.exit_code, e.signal_name, e.msg) == (1, 3, None, "process 1 terminated with exit "
                                                                  "code 3")
    with pytest.raises(mp.ProcessRaisedException, match="-- Process 0 terminated with the following error") as failed:
        mp.spawn(interrupted, nprocs=1)
    assert failed.value.msg.rstrip().endswith("KeyboardInterrupt")


def test_process_exceptions_keep_torchs_fields_through_pickle():
    raised = pickle.loads(pickle.dumps(mp.ProcessRaisedException("m", 1, 77)))
    assert (type(raised).__name__, raised.msg, raised.error_index, raised.error_pid, str(raised)) == (
        "ProcessRaisedException", "m", 1, 77, "m")
    exited = pickle.loads(pickle.dumps(mp.ProcessExitedException("x", 0, 5, -9, "SIGKILL")))
    assert (exited.msg, exited.error_index, exited.error_pid, exited.exit_code, exited.signal_name) == (
        "x", 0, 5, -9, "SIGKILL")


VALUE = {"v": "import-time"}


def report_value(i, path):
    with open(path, "w") as f:
        f.write(VALUE["v"])


def test_spawn_always_spawns_and_join_takes_a_grace_period(tmp_path):
    VALUE["v"] = "set-in-parent"
    try:
        with pytest.warns(FutureWarning, match=r"only supports start_method=spawn \(got: fork\)"):
            ctx = mp.spawn(report_value, args=(str(tmp_path / "v"),), nprocs=1, join=False, start_method="fork")
        assert len(ctx.error_files) == 1 and len(ctx.pids()) == 1
        while not ctx.join(timeout=5, grace_period=1):
            pass
    finally:
        VALUE["v"] = "import-time"
    assert (tmp_path / "v").read_text() == "import-time"  # torch's: a fresh interpreter, not a fork


def test_spawn_context_and_sharing_strategies():
    with pytest.warns(UserWarning, match="SpawnContext is renamed to ProcessContext since 1.4 release."):
        ctx = mp.SpawnContext([], [])
    assert (ctx.join(), ctx.pids(), ctx.error_files) == (True, [], [])
    assert (mp.get_sharing_strategy(), sorted(mp.get_all_sharing_strategies())) == (
        "file_descriptor", ["file_descriptor", "file_system"])
    with pytest.raises(AssertionError, match="invalid sharing strategy 'bogus'"):
        mp.set_sharing_strategy("bogus")


def write_script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def test_the_launchers_main_raises_child_failed_error_listing_every_failed_rank(tmp_path):
    script = write_script(tmp_path, "job.py", """
        import os, sys, time
        if os.environ["RANK"] == "1":
            sys.exit(3)
        time.sleep(30)
    """)
    with pytest.raises(ChildFailedError) as failed:
        torchrun.main(["--nproc-per-node", "2", "--master-port", str(free_port()), script])
    e = failed.value
    rank, first = e.get_first_failure()
    assert (e.name, sorted(e.failures), rank, first.exitcode, e.failures[0].exitcode) == (script, [0, 1], 1, 3, -15)
    text = str(e)
    assert "Root Cause (first observed failure):\n[0]:\n" in text and "host      : %s\n" % socket.getfqdn() in text
    assert "  exitcode  : -15 (pid: %d)  (SIGTERM)\n" % e.failures[0].pid in text
    assert "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html" in text
    ok = write_script(tmp_path, "ok.py", "print('ran')\n")
    assert torchrun.main(["--nproc-per-node", "1", "--master-port", str(free_port()), ok]) is None


def test_config_from_args_and_the_legacy_launcher(tmp_path):
    from tessel.distributed import launch as legacy_launch
    config, cmd, args = torchrun.config_from_args(torchrun.parse_args(
        ["--nproc-per-node", "2", "--max-restarts", "1", "--rdzv-conf", "join_timeout=5", "train.py", "--lr", "3"]))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node, config.max_restarts, config.rdzv_backend,
            config.rdzv_endpoint, config.rdzv_configs, cmd, args) == (
        1, 1, 2, 1, "static", "127.0.0.1:None", {"join_timeout": "5", "rank": 0, "timeout": 900}, sys.executable,
        ["-u", "train.py", "--lr", "3"])  # torch's
    assert torchrun.config_from_args(torchrun.parse_args(["-m", "pkg.mod", "x"]))[2] == ["-u", "-m", "pkg.mod", "x"]
    _, cmd, args = torchrun.config_from_args(torchrun.parse_args(["--run-path", "s.py", "y"]))
    assert (cmd.__name__, args) == ("run_script_path", ["s.py", "y"])
    with pytest.raises(ValueError, match="Don't use both the '--no-python' flag and the '--module' flag"):
        torchrun.config_from_args(torchrun.parse_args(["--no-python", "-m", "x"]))
    legacy = legacy_launch.parse_args(["--nproc-per-node", "1", "s.py"])
    assert (legacy.use_env, torchrun.config_from_args(legacy)[2]) == (False, ["-u", "s.py",
                                                                             "--local-rank=${local_rank}"])
    script = write_script(tmp_path, "argv.py", """
        import os, sys
        open(os.path.join(os.path.dirname(__file__), "argv.txt"), "w").write(" ".join(sys.argv[1:]))
    """)
    with pytest.warns(FutureWarning, match="The module torch.distributed.launch is deprecated"):
        legacy_launch.main(["--nproc-per-node", "1", "--master-port", str(free_port()), script, "a"])
    assert (tmp_path / "argv.txt").read_text() == "--local-rank=0 a"  # torch's
    with pytest.raises(ValueError, match="When using the '--no-python' flag, you must also set the '--use-env'"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            legacy_launch.main(["--no-python", "echo", "a"])


def fails_first_time():
    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        raise RuntimeError("transient")
    return int(os.environ["TORCHELASTIC_RESTART_COUNT"])


def test_elastic_launch_names_each_failed_rank_of_a_command_and_restarts_a_function(tmp_path):
    script = write_script(tmp_path, "fail_all.py", "raise ValueError('x')\n")
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=0)
    with pytest.raises(ChildFailedError) as failed:
        elastic_launch(config, sys.executable)(script)
    e = failed.value
    assert (e.name, sorted(e.failures), [f.exitcode for _, f in sorted(e.failures.items())]) == (script, [0, 1],
                                                                                                [1, 1])  # torch's
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1, rdzv_backend="c10d",
                          rdzv_endpoint="localhost:0", max_restarts=1)
    assert elastic_launch(config, fails_first_time)() == {0: 1}  # torch's: the second attempt's value


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
