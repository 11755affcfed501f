"""The Python torchrun (python -m tessel.distributed.run) and torch.distributed.launcher.api.elastic_launch: two
gloo worker processes get torchrun's variables and all-reduce; a failing worker stops its peer at once (not after
the collective timeout) and the launcher prints its exception as the root cause; --max-restarts restarts the
group; --log-dir with --redirects / --tee and --local-ranks-filter place the workers' streams as torchrun does;
elastic_launch returns each rank's value or raises ChildFailedError naming the failed rank."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from tessel.distributed.elastic.multiprocessing.errors import ChildFailedError
from tessel.distributed.launcher.api import LaunchConfig, elastic_launch

ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def launch(tmp_path, body, *flags):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "tessel.distributed.run", *flags, str(script), "x1"], env=ENV,
                         capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    return out, time.monotonic() - start


def test_two_workers_get_torchruns_variables_and_all_reduce(tmp_path):
    out, _ = launch(tmp_path, """
        import os, sys, tessel, tessel.distributed as dist
        dist.init_process_group("gloo")
        t = tessel.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_WORLD_SIZE",
                "OMP_NUM_THREADS"]
        with open("out_%s.txt" % os.environ["RANK"], "w") as f:
            f.write(" ".join([os.environ[k] for k in keys] + [str(t.item()), sys.argv[1]]))
        dist.destroy_process_group()
    """, "--standalone", "--nproc-per-node", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    for r in (0, 1):
        assert (tmp_path / ("out_%d.txt" % r)).read_text() == "%d %d 2 2 0 2 1 3.0 x1" % (r, r)


def test_two_concurrent_one_node_jobs_without_a_port_do_not_collide(tmp_path):
    """torch 2.15 rendezvouses one node at a free port unless one is given: both jobs run (the second one failed
    on 29500 here). An explicit --master-port is still used as given."""
    body = textwrap.dedent("""
        import os, time, tessel, tessel.distributed as dist
        dist.init_process_group("gloo")
        time.sleep(1.5)  # both jobs hold their stores at once
        t = tessel.tensor([1.0])
        dist.all_reduce(t)
        with open("port_%s.txt" % os.environ["RANK"], "w") as f:
            f.write("%s %s" % (os.environ["MASTER_PORT"], t.item()))
        dist.destroy_process_group()
    """)
    jobs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "job.py").write_text(body)
        jobs.append(subprocess.Popen([sys.executable, "-m", "tessel.distributed.run", "--nproc-per-node", "2",
                                      "job.py"], env=ENV, cwd=str(tmp_path / name), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True))
    outs = [j.communicate(timeout=120)[0] for j in jobs]
    assert [j.returncode for j in jobs] == [0, 0], outs
    ports = [(tmp_path / n / "port_0.txt").read_text().split() for n in ("a", "b")]
    assert ports[0][1] == ports[1][1] == "2.0" and ports[0][0] != ports[1][0] and "29500" not in (ports[0][0],
                                                                                                   ports[1][0])


def test_a_failing_worker_stops_the_group_and_is_the_root_cause(tmp_path):
    out, took = launch(tmp_path, """
        import os, time, tessel, tessel.distributed as dist
        from tessel.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            dist.init_process_group("gloo")
            if dist.get_rank() == 1:
                raise KeyError("shard 1 is missing")
            time.sleep(60)  # rank 0 would wait here far longer than the launcher lets it

        main()
    """, "--nproc_per_node=2", "--master-port", "0")
    assert out.returncode == 1, out.stdout + out.stderr
    assert took < 45
    lines = out.stderr.splitlines()
    i = lines.index("[tessel.distributed.run] root cause (first observed failure): rank 1 (local_rank 1), exit code 1")
    assert lines[i + 1] == "[tessel.distributed.run]   KeyError: 'shard 1 is missing'"
    assert any("in main" in line for line in lines[i:]), out.stderr


def _rank_one_fails_first(tmp_path, failure):
    """Rank 1 runs `failure` (one statement), rank 0 fails 0.2 s after rank 1 began to (its peer gone), both under
    @record, mostly within one of the launcher's 2 s polls: launch's result."""
    return launch(tmp_path, """
        import os, signal, time
        from tessel.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            if os.environ["RANK"] == "1":
                open("rank1_failing", "w").close()
                %s
            while not os.path.exists("rank1_failing"):
                time.sleep(0.001)
            time.sleep(0.2)
            raise RuntimeError("rank 0 failed after its peer")

        main()
    """ % failure, "--nproc_per_node=2", "--master-port", "0", "--monitor-interval", "2")


def test_the_root_cause_is_the_earliest_failure_when_two_fail_within_one_poll(tmp_path):
    """Rank 1 raises first: the root cause is rank 1, by the error files' times (list order named rank 0)."""
    out, _ = _rank_one_fails_first(tmp_path, 'raise KeyError("the first failure")')
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    i = lines.index("[tessel.distributed.run] root cause (first observed failure): rank 1 (local_rank 1), exit code 1")
    assert lines[i + 1] == "[tessel.distributed.run]   KeyError: 'the first failure'"


def test_a_rank_killed_by_a_signal_is_the_root_cause_over_the_peer_that_reported_it(tmp_path):
    """Rank 1 crashes (SIGSEGV: no error file): the crash is the root cause. The error files' times named rank 0,
    the only one that wrote one."""
    out, _ = _rank_one_fails_first(tmp_path, "os.kill(os.getpid(), signal.SIGSEGV)")
    assert out.returncode == 1, out.stdout + out.stderr
    assert ("[tessel.distributed.run] root cause (first observed failure): rank 1 (local_rank 1), killed by signal "
            "SIGSEGV (11)") in out.stderr.splitlines(), out.stderr


def test_a_rank_that_exits_without_an_error_file_is_the_root_cause_over_the_peer_that_saw_it_go(tmp_path):
    """Rank 1 leaves with os._exit(3) (no error file) while rank 0 waits for it in an all_reduce: rank 0's recorded
    error names rank 1's closed connection, and rank 1 is the root cause (the error files' times named rank 0,
    the only one that wrote one)."""
    out, _ = launch(tmp_path, """
        import os
        import tessel
        import tessel.distributed as dist
        from tessel.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            dist.init_process_group("gloo")
            dist.barrier()
            if dist.get_rank() == 1:
                os._exit(3)
            dist.all_reduce(tessel.ones(4))

        main()
    """, "--nproc_per_node=2", "--master-port", "0", "--monitor-interval", "2")
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stderr.splitlines()
    root = "[tessel.distributed.run] root cause (first observed failure): rank 1 (local_rank 1), exit code 3"
    assert root in lines, out.stderr


def test_both_processes_of_a_cross_group_deadlock_get_the_diagnosis_when_the_finder_exits_at_once(tmp_path):
    """Two groups taken in opposite orders: the rank whose monitor finds the deadlock raises and exits at once, and
    its peer, whose wait then failed on the closed connection, reported "process exited or died" (5 of 5 runs in
    a sweep); the peer now reads the verdict the finder published."""
    out, _ = launch(tmp_path, """
        import os
        import tessel
        import tessel.distributed as dist

        dist.init_process_group("gloo")
        sub = dist.new_group([0, 1])
        try:
            dist.all_reduce(tessel.ones(2), group=sub if dist.get_rank() == 0 else None)
        except Exception as e:
            with open("error_%d.txt" % dist.get_rank(), "w") as f:
                f.write(str(e))
            os._exit(1)
    """, "--nproc_per_node=2", "--master-port", "0")
    assert out.returncode == 1, out.stdout + out.stderr
    for rank in range(2):
        error = (tmp_path / ("error_%d.txt" % rank)).read_text()
        assert error.startswith("deadlock: rank 0 waits in all_reduce #0 (8 B, float32, sum) on group"), error


def test_the_launcher_serves_the_store_so_rank_0_may_exit_first(tmp_path):
    """torchrun's agent store: the workers are clients of a TCP store at MASTER_PORT that the launcher serves, so a
    key rank 0 set is still there after rank 0 exited (rank 0 served it before: a rank 0 that finished first took it
    away from ranks still rendezvousing, and this read failed)."""
    out, _ = launch(tmp_path, """
        import datetime, os, time, tessel.distributed as dist
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=datetime.timedelta(seconds=10))
        if os.environ["RANK"] == "0":
            store.set("from_rank_0", "hello")
            with open("rank0.pid", "w") as f:
                f.write(str(os.getpid()))
        else:
            while not os.path.exists("rank0.pid") or not open("rank0.pid").read():
                time.sleep(0.05)
            pid = int(open("rank0.pid").read())
            try:
                while True:  # until rank 0 has exited and the launcher has reaped it
                    os.kill(pid, 0)
                    time.sleep(0.05)
            except ProcessLookupError:
                pass
            with open("out.txt", "w") as f:
                f.write(store.get("from_rank_0").decode() + " " + os.environ["TORCHELASTIC_USE_AGENT_STORE"])
    """, "--standalone", "--nproc-per-node", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "out.txt").read_text() == "hello True"


def test_a_second_world_after_destroy_gets_keys_of_its_own_in_the_launchers_store(tmp_path):
    out, _ = launch(tmp_path, """
        import os, tessel, tessel.distributed as dist
        sums = []
        for world in range(3):
            dist.init_process_group("gloo")
            t = tessel.tensor([float(dist.get_rank() + 1 + world)])
            dist.all_reduce(t)
            sums.append(t.item())
            dist.destroy_process_group()
        with open("out_%s.txt" % os.environ["RANK"], "w") as f:
            f.write(" ".join(map(str, sums)))
    """, "--standalone", "--nproc-per-node", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    for r in (0, 1):
        assert (tmp_path / ("out_%d.txt" % r)).read_text() == "3.0 5.0 7.0"


def test_a_worker_that_ended_before_init_fails_its_peers_rendezvous_at_once_naming_it(tmp_path):
    """A worker that returns (exit code 0) before init_process_group: its peer's rendezvous waited out the 300 s
    timeout ("key '.../tessel/1' not set"); the launcher records the exit in its store and the wait fails at once."""
    out, seconds = launch(tmp_path, """
        import os, tessel, tessel.distributed as dist
        if os.environ["RANK"] == "0":
            dist.init_process_group("gloo")
    """, "--standalone", "--nproc-per-node", "2")
    assert out.returncode == 1 and seconds < 30, (seconds, out.stdout + out.stderr)
    assert ("rank 1 (global 1) exited with exit code 0 before it joined this group's rendezvous (tcp store "
            in out.stderr), out.stderr
    assert "it never will (the launcher saw its process exit)" in out.stderr


def test_max_restarts_runs_the_group_again(tmp_path):
    out, _ = launch(tmp_path, """
        import os
        if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and os.environ["RANK"] == "0":
            raise SystemExit(3)  # the first attempt fails
        open("ran_%s_%s" % (os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]), "w").close()
    """, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0 failed (exit code 3); restarting the workers (1 of 1)" in out.stderr
    assert sorted(p.name for p in tmp_path.glob("ran_*")) in (["ran_0_1", "ran_1_1"], ["ran_0_1", "ran_1_0", "ran_1_1"])


def test_log_directory_redirects_tee_and_the_console_filter(tmp_path):
    body = """
        import os, sys
        print("out of", os.environ["RANK"], flush=True)
        print("err of", os.environ["RANK"], file=sys.stderr, flush=True)
    """
    logs = tmp_path / "logs"
    out, _ = launch(tmp_path, body, "--standalone", "--nproc-per-node", "2", "--log-dir", str(logs), "--redirects",
                    "3", "--rdzv-id", "job7")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "out of" not in out.stdout and "err of" not in out.stderr  # files only
    for r in (0, 1):
        folder = logs / "job7" / "attempt_0" / str(r)
        assert (folder / "stdout.log").read_text() == "out of %d\n" % r
        assert (folder / "stderr.log").read_text() == "err of %d\n" % r
    out, _ = launch(tmp_path, body, "--standalone", "--nproc-per-node", "2", "--log-dir", str(logs), "--tee", "1",
                    "--local-ranks-filter", "1", "--rdzv-id", "job8")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["[default1]:out of 1"]  # tee'd with torchrun's prefix; rank 0 filtered out
    assert "err of 1" in out.stderr and "err of 0" not in out.stderr  # stderr untouched but filtered
    assert (logs / "job8" / "attempt_0" / "0" / "stdout.log").read_text() == "out of 0\n"  # the file keeps it


def square_of_rank(offset):
    import tessel.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    return (rank + offset) ** 2


def fail_on_rank_one():
    if os.environ["RANK"] == "1":
        raise ValueError("rank one fails")
    time.sleep(60)


@pytest.mark.parametrize("signame, second", [("SIGTERM", False), ("SIGHUP", False), ("SIGINT", True)])
def test_a_signal_to_the_launcher_stops_its_workers_and_their_children(tmp_path, signame, second):
    """A signal sent to the launcher alone: the workers are stopped too (they were left running, orphaned), and the
    launcher returns 128 + the signal. SIGHUP (a closed ssh session) and SIGQUIT left them orphaned; the processes a
    worker started survived (only the worker was signalled); a second signal during the shutdown raised inside it
    and orphaned them too."""
    import signal
    signum = getattr(signal, signame)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, subprocess, time
        child = subprocess.Popen(["sleep", "60"])
        open("pid_%s" % os.environ["RANK"], "w").write("%d %d" % (os.getpid(), child.pid))
        time.sleep(60)
    """))
    launcher = subprocess.Popen([sys.executable, "-m", "tessel.distributed.run", "--nproc_per_node", "2",
                                 str(script)], env=ENV, cwd=str(tmp_path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not all((tmp_path / ("pid_%d" % r)).exists() and (tmp_path / ("pid_%d" % r)).read_text()
                  for r in (0, 1)) and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [int(p) for r in (0, 1) for p in (tmp_path / ("pid_%d" % r)).read_text().split()]
    launcher.send_signal(signum)
    if second:
        time.sleep(0.2)
        launcher.send_signal(signum)
    _, err = launcher.communicate(timeout=30)
    assert launcher.returncode == 128 + signum, err
    assert "received signal %d: stopping the workers" % signum in err
    time.sleep(0.2)
    for pid in pids:  # workers and their sleep children: gone (or a zombie of init's, never still sleeping)
        try:
            with open("/proc/%d/stat" % pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            continue
        assert state == "Z", (pid, state)


def test_bad_worker_counts_and_a_multi_node_run_without_node_ranks_are_refused(tmp_path):
    # --nproc-per-node 0 started nothing and returned 0; --nnodes 2 without --node-rank made every node node 0
    # (one failed to bind the store's port, the other waited out its timeout)
    out, _ = launch(tmp_path, "print('ran')", "--nproc_per_node", "0")
    assert out.returncode != 0 and "--nproc-per-node must be at least 1, got 0" in out.stderr, out.stderr
    out, _ = launch(tmp_path, "print('ran')", "--nnodes", "2", "--nproc_per_node", "1", "--master-port", "29555")
    assert out.returncode != 0 and "--nnodes 2 needs --node-rank on each node (0 to 1)" in out.stderr, out.stderr


def test_elastic_launch_returns_each_ranks_value_or_raises_child_failed():
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, rdzv_endpoint="localhost:0")
    assert elastic_launch(config, square_of_rank)(3) == {0: 9, 1: 16}
    start = time.monotonic()
    with pytest.raises(ChildFailedError) as failed:
        elastic_launch(config, fail_on_rank_one)()
    assert time.monotonic() - start < 45
    assert list(failed.value.failures) == [1]
    rank, failure = failed.value.get_first_failure()
    assert rank == 1 and failure.local_rank == 1 and failure.exitcode == 1
    assert failure.message["message"] == "ValueError: rank one fails"
    assert "in fail_on_rank_one" in failure.message["extraInfo"]["py_callstack"]
    text = str(failed.value)
    assert "fail_on_rank_one FAILED" in text and "Root Cause (first observed failure):" in text
    with pytest.raises(NotImplementedError, match="elastic node counts"):
        LaunchConfig(min_nodes=1, max_nodes=2, nproc_per_node=1)


def test_torchruns_environment_defaults_and_a_bare_rdzv_host_are_taken(tmp_path):
    # PET_NPROC_PER_NODE (Kubeflow's PyTorchJob sets the PET_ defaults) was ignored: one worker; an endpoint
    # without a port raised ValueError from the launcher's parsing
    script = tmp_path / "job.py"
    script.write_text("import os\nopen('ran_%s' % os.environ['RANK'], 'w').write(os.environ['WORLD_SIZE'])\n")
    env = dict(ENV, PET_NPROC_PER_NODE="2")
    out = subprocess.run([sys.executable, "-m", "tessel.distributed.run", "--rdzv_endpoint", "localhost",
                          str(script)], env=env, capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert [(tmp_path / ("ran_%d" % r)).read_text() for r in (0, 1)] == ["2", "2"]


def test_record_lets_sys_exit_without_a_code_end_the_script_as_torchs(tmp_path):
    # @record returned None for sys.exit() (no code), so the code after main() ran; torch re-raises it
    out, _ = launch(tmp_path, """
        import sys
        from tessel.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            sys.exit()

        main()
        open("after_main", "w").close()
    """, "--nproc_per_node=1")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "after_main").exists()

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
