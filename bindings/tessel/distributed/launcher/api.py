"""torch.distributed.launcher.api: LaunchConfig and elastic_launch, torchrun from Python.

    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, rdzv_endpoint="localhost:0")
    results = elastic_launch(config, train)(lr)      # {0: train(lr) on rank 0, 1: ... on rank 1}

A callable entrypoint runs in nproc_per_node fresh processes (the spawn start method, so it must be importable:
a module-level function) with torchrun's variables set (tessel.distributed.run); its return values come back by
local rank. A string entrypoint is a command run with the arguments, as torchrun --no-python, and the result is
{rank: None}. A failed worker stops the others at once; the group runs again (TORCHELASTIC_RESTART_COUNT one
more) up to config.max_restarts times, then ChildFailedError names the failed ranks, their ProcessFailures
carrying the exception and traceback (written to its TORCHELASTIC_ERROR_FILE, as @record does). Static
rendezvous: min_nodes == max_nodes, node_rank from the config's rdzv_configs (default 0).
"""
import dataclasses
import multiprocessing
import os
import tempfile
import time
import uuid

from ..elastic.multiprocessing.api import SignalException
from ..elastic.multiprocessing.errors import ChildFailedError, ProcessFailure, get_error_handler
from ..run import AgentStore, _free_port, entrypoint_name, run_workers, worker_env

__all__ = ["LaunchConfig", "elastic_launch", "launch_agent"]


@dataclasses.dataclass
class LaunchConfig:
    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    logs_specs: object = None
    run_id: str = ""
    role: str = "default_role"
    rdzv_endpoint: str = ""
    rdzv_backend: str = "etcd"
    rdzv_configs: dict = dataclasses.field(default_factory=dict)
    rdzv_timeout: int = -1
    max_restarts: int = 3
    monitor_interval: float = 0.1
    start_method: str = "spawn"
    log_line_prefix_template: object = None
    metrics_cfg: dict = dataclasses.field(default_factory=dict)
    local_addr: object = None
    event_log_handler: str = "null"
    numa_options: object = None
    signals_to_handle: str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    duplicate_stdout_filters: object = None
    duplicate_stderr_filters: object = None
    virtual_local_rank: bool = False
    shutdown_timeout: object = None

    def __post_init__(self):
        if self.rdzv_timeout != -1:  # torch's: the rendezvous timeout travels in rdzv_configs (default 900 s)
            self.rdzv_configs["timeout"] = self.rdzv_timeout
        elif "timeout" not in self.rdzv_configs:
            self.rdzv_configs["timeout"] = 900
        if self.min_nodes != self.max_nodes:
            raise NotImplementedError("LaunchConfig: min_nodes %d != max_nodes %d: elastic node counts are not "
                                      "supported (static rendezvous)" % (self.min_nodes, self.max_nodes))


class elastic_launch:  # noqa: N801 (torch's name)
    def __init__(self, config, entrypoint):
        self._config, self._entrypoint = config, entrypoint

    def __call__(self, *args):
        return launch_agent(self._config, self._entrypoint, list(args))


def _endpoint(config):
    host, _, port = config.rdzv_endpoint.rpartition(":") if config.rdzv_endpoint else ("", "", "")
    host = host or "127.0.0.1"
    if host == "localhost":
        host = "127.0.0.1"
    port = int(port) if port.isdigit() else 0  # (config_from_args without a port names it "None")
    return host, port or _free_port(host)


def _worker(entrypoint, args, env, out):
    os.environ.update(env)
    try:
        out.put((int(env["LOCAL_RANK"]), True, entrypoint(*args)))
    except BaseException as e:  # noqa: BLE001 (reported to the launcher, then the worker exits non-zero)
        get_error_handler().record_exception(e)  # into TORCHELASTIC_ERROR_FILE, as @record does
        out.put((int(env["LOCAL_RANK"]), False, None))
        raise SystemExit(1)


def launch_agent(config, entrypoint, args):
    """Runs the workers of this node, again up to config.max_restarts times while one fails; {global rank:
    return value} or ChildFailedError. A string entrypoint is a command (its failures: every rank that ended
    non-zero, the root cause first, as torch's agent lists a binary's); a function's: the ranks that failed."""
    nproc, nnodes = int(config.nproc_per_node), int(config.max_nodes)
    node_rank = int(config.rdzv_configs.get("rank", 0))
    host, port = _endpoint(config)
    run_id = config.run_id or uuid.uuid4().hex[:8]
    if isinstance(entrypoint, str):
        failures = {}
        code = run_workers([entrypoint] + [str(a) for a in args], nproc, nnodes=nnodes, node_rank=node_rank,
                           master_addr=host, master_port=port, max_restarts=config.max_restarts,
                           monitor_interval=config.monitor_interval, run_id=run_id, role=config.role,
                           failures=failures)
        if failures:
            raise ChildFailedError(entrypoint_name(entrypoint, [str(a) for a in args]), failures)
        if code != 0:  # (stopped by a signal to this process)
            raise SignalException("Process %d got signal: %d" % (os.getpid(), code - 128), code - 128)
        return {node_rank * nproc + i: None for i in range(nproc)}
    # (a forked worker would inherit the store's server: then rank 0 serves it, as before)
    with AgentStore(node_rank, host, port, os.environ, allowed=config.start_method != "fork") as agent:
        for restart in range(config.max_restarts + 1):
            results, failures = _launch_function(config, entrypoint, args, nproc, nnodes, node_rank, host, port,
                                                 run_id, restart, agent.enabled)
            if not failures:
                return results
    raise ChildFailedError(entrypoint_name(entrypoint, args), failures)


def _launch_function(config, entrypoint, args, nproc, nnodes, node_rank, host, port, run_id, restart, agent_store):
    """One attempt of a function entrypoint: (results, {}) or ({}, {global rank: ProcessFailure})."""
    ctx = multiprocessing.get_context(config.start_method)
    out = ctx.Queue()
    procs = []
    errors = tempfile.TemporaryDirectory(prefix="tessel_launch_")
    files = [os.path.join(errors.name, "error_%d.json" % local) for local in range(nproc)]
    for local in range(nproc):
        env = dict(worker_env(local, nproc, nnodes=nnodes, node_rank=node_rank, role=config.role, master_addr=host,
                              master_port=port, run_id=run_id, restart=restart, max_restarts=config.max_restarts,
                              agent_store=agent_store),
                   TORCHELASTIC_ERROR_FILE=files[local])
        p = ctx.Process(target=_worker, args=(entrypoint, args, env, out), daemon=False)
        p.start()
        procs.append(p)
    base = node_rank * nproc
    results, failed = {}, set()

    def drain():
        while not out.empty():
            local, ok, value = out.get()
            if ok:
                results[base + local] = value
            else:
                failed.add(base + local)

    while len(results) + len(failed) < nproc and not failed:
        drain()
        dead = {base + i for i, p in enumerate(procs) if p.exitcode not in (None, 0)} - set(results)
        if dead:
            time.sleep(0.2)  # its report may still be in the pipe
            drain()
            failed |= dead
        elif not failed:
            time.sleep(config.monitor_interval)
    if failed:
        for rank in failed:  # the failed ones exit on their own (their exit code is the report)
            procs[rank - base].join(5)
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
        found = {rank: ProcessFailure(rank - base, procs[rank - base].pid, procs[rank - base].exitcode or 1,
                                      files[rank - base]) for rank in sorted(failed)}
        errors.cleanup()
        return {}, found
    for p in procs:
        p.join()
    errors.cleanup()
    return results, {}
