"""init_process_group's argument checks and its rendezvous for torch's init_method forms (env://, tcp://, file://),
split from distributed/__init__.py. A rendezvous given rank= / world_size= or a tcp:// or file:// address makes
its store here and leaves os.environ as it was (torch's does not write RANK, MASTER_PORT, ...: a later
init_process_group on another port, or the processes this one starts, would read them); the launcher's
environment alone is read by the C++ rendezvous (comm/backends/gloo_init.cc). TESSEL_STORE_DIR, as there,
rendezvouses through files in that directory instead of rank 0's TCP store; under tessel.distributed.run (as under
torchrun, TORCHELASTIC_USE_AGENT_STORE=True) the launcher serves the TCP store and every rank is its client.
"""
import datetime
import os
from urllib.parse import urlparse

from .. import _C
from ._store import FileStore, PrefixStore, Store, TCPStore

_BACKENDS = (None, "undefined", "gloo", "cpu:gloo", "threads")


def check_arguments(backend, init_method, timeout, world_size, rank, store, device_id):
    """torch's checks, in its order, before anything is started. Returns the backend's lower-case name."""
    if store is not None and init_method is not None:
        raise AssertionError("Cannot specify both init_method and store.")
    if store is not None:
        if not world_size > 0:
            raise AssertionError("world_size must be positive if using store")
        if not rank >= 0:
            raise AssertionError("rank must be non-negative if using store")
    if isinstance(device_id, int) and not isinstance(device_id, bool):
        raise ValueError("device_id is an int, but no accelerator support is found from the current compilation. "
                         "Please use a different compiled version that supports your accelerator.")
    if device_id is not None:
        if getattr(device_id, "type", None) != "cpu":
            raise ValueError("device_id %s does not match the current compilation's accelerator support: None. "
                             "Please use a different compiled version that supports your accelerator." % (device_id,))
        if device_id.index is None:  # (torch checks it after its rendezvous: here no rank waits for this one)
            raise ValueError("init_process_group device_id parameter must be a device with a valid index, e.g. "
                             "cpu:0 or cuda:0")
    name = None if backend is None else str(backend).lower()  # torch's Backend() lower-cases ("GLOO")
    if name not in _BACKENDS:
        raise ValueError("init_process_group: backend '%s' is not available from Python (gloo, or threads "
                         "under tessel.run_ranks)" % backend)
    if timeout is not None and not isinstance(timeout, datetime.timedelta):
        raise TypeError("Expected timeout argument to be of type datetime.timedelta, got %s" % (timeout,))
    return name


def _error(scheme, what):
    return ValueError("Error initializing torch.distributed using %s:// rendezvous: %s" % (scheme, what))


def _query(text):
    return dict(pair.split("=", 1) for pair in filter(None, text.split("&")) if "=" in pair)


def default_timeout():
    """The rendezvous deadline without timeout=: TESSEL_COMM_TIMEOUT_MS, else the default group timeout."""
    ms = os.environ.get("TESSEL_COMM_TIMEOUT_MS")
    return datetime.timedelta(milliseconds=int(ms)) if ms else datetime.timedelta(seconds=300)


def rendezvous(init_method, rank, world_size, timeout):
    """(store, rank, world_size) for init_method and the rank= / world_size= given (-1: not given), torch's
    way: env:// fills what is missing from RANK / WORLD_SIZE and needs MASTER_ADDR / MASTER_PORT; tcp:// and
    file:// need both numbers (in the call or the URL's query). None when neither was given to env://: the
    launcher's environment names the whole group, and the C++ rendezvous reads it."""
    url = init_method if init_method is not None else "env://"
    if not isinstance(url, str):
        raise RuntimeError("`url` must be a string. %s: %s" % (type(url), url))
    parsed = urlparse(url)
    query = _query(parsed.query)
    if rank != -1 or world_size != -1:
        if "rank" in query or "world_size" in query:
            raise AssertionError("The url: %s has node-specific arguments(rank, world_size) already." % url)
        if rank != -1:
            query["rank"] = str(rank)
        if world_size != -1:
            query["world_size"] = str(world_size)
    timeout = timeout if timeout is not None else default_timeout()
    scheme = parsed.scheme
    if scheme == "env":
        if "rank" not in query and "world_size" not in query:
            return None

        def env(var):
            if not os.environ.get(var):
                raise _error("env", "environment variable %s expected, but not set" % var)
            return os.environ[var]
        rank = int(query["rank"]) if "rank" in query else int(env("RANK"))
        world_size = int(query["world_size"]) if "world_size" in query else int(env("WORLD_SIZE"))
        host, port = env("MASTER_ADDR"), int(env("MASTER_PORT"))
    elif scheme in ("tcp", "file"):
        if scheme == "tcp" and parsed.port is None:
            raise _error(scheme, "port number missing")
        if scheme == "file" and not parsed.path:
            raise _error(scheme, "path missing")
        if "rank" not in query:
            raise _error(scheme, "rank parameter missing")
        if "world_size" not in query:
            raise _error(scheme, "world size parameter missing")
        rank, world_size = int(query["rank"]), int(query["world_size"])
        if scheme == "file":
            return FileStore(parsed.path, world_size), rank, world_size
        host, port = parsed.hostname, parsed.port
    else:
        raise RuntimeError("No rendezvous handler for %s://" % scheme)
    if not 0 <= port < 2 ** 16:
        raise ValueError("port must have value from 0 to 65535 but was %d." % port)
    folder = os.environ.get("TESSEL_STORE_DIR")
    if folder:  # (comm's directory rendezvous, as the C++ one: no port for concurrent jobs to race for)
        files = Store(_C._file_store(folder), timeout)
        files.host = host
        return PrefixStore("tessel/%d" % port, files), rank, world_size
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # The launcher serves the store (torch's agent store): every rank is a client, under the attempt's prefix, so
        # rank 0 exiting first cannot take the store away from ranks still rendezvousing (a later world of this
        # process gets keys of its own: the C++ rendezvous's count, comm/backends/gloo.h).
        prefix = _C._next_agent_store_prefix(int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
        client = PrefixStore(prefix, TCPStore(host, port, world_size, is_master=False, timeout=timeout))
        client.host = host  # (the address's loopback-ness picks the transport's, as for rank 0's store)
        return client, rank, world_size
    store = TCPStore(host, port, world_size, is_master=(rank == 0), timeout=timeout, multi_tenant=True)
    return store, rank, world_size
