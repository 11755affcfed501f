"""torch.distributed.Store and its kinds (TCPStore, FileStore, HashStore, PrefixStore) over the C++ stores of
comm/store.h: keys to bytes shared by the ranks, the rendezvous of init_process_group. Split from
distributed/__init__.py by concept; tessel.distributed re-exports every name.

    store = TCPStore("127.0.0.1", 0, world_size=1, is_master=True)
    store.set("k", b"v"); store.get("k")  # b"v"
"""
import datetime

from .. import _C

DistTimeoutError = _C.DistTimeoutError

_DEFAULT_STORE_TIMEOUT = datetime.timedelta(seconds=300)


def _as_bytes(value):
    return value if isinstance(value, bytes) else str(value).encode()


class Store:
    """torch.distributed.Store: keys to bytes, shared by the ranks. get() and wait() wait up to the store's
    timeout (or wait's own) for a key, then raise DistTimeoutError (a TimeoutError) naming it; add() is atomic
    across clients and keeps the counter as decimal text (get() of it reads b"5", as torch's)."""

    def __init__(self, impl, timeout=_DEFAULT_STORE_TIMEOUT):
        self._impl, self.timeout = impl, timeout

    def set(self, key, value):
        self._impl.set(key, _as_bytes(value))

    def get(self, key):
        return self._impl.get(key, self.timeout)

    def add(self, key, amount):
        return self._impl.add(key, int(amount))

    def check(self, keys):
        return self._impl.check(list(keys))

    def wait(self, keys, timeout=None):
        self._impl.wait(list(keys), self.timeout if timeout is None else timeout)

    def set_timeout(self, timeout):
        self.timeout = timeout

    def compare_set(self, key, expected_value, desired_value):
        """key becomes desired_value when it holds expected_value (or is absent and expected_value is empty);
        returns what it holds afterwards, atomically across clients (torch's)."""
        return self._impl.compare_set(key, _as_bytes(expected_value), _as_bytes(desired_value))

    def delete_key(self, key):
        return self._impl.delete_key(key)

    def num_keys(self):
        """Keys in the store, every client's (internal rendezvous keys included, as torch's)."""
        return self._impl.num_keys()

    def __repr__(self):
        return "%s(%r)" % (type(self).__name__, self._impl)


class TCPStore(Store):
    """Served by the process with is_master=True at (host_name, port); port 0 there picks a free one (read
    .port). Clients retry connecting until the timeout. With world_size and wait_for_workers, the master's
    constructor returns once world_size clients (itself included) have connected, as torch's."""

    def __init__(self, host_name, port, world_size=None, is_master=False, timeout=_DEFAULT_STORE_TIMEOUT,
                 wait_for_workers=True, multi_tenant=False, master_listen_fd=None, use_libuv=True):
        impl, self.port = _C._tcp_store(host_name, int(port), bool(is_master), timeout)
        super().__init__(impl, timeout)
        self.host = host_name
        if world_size is not None and world_size > 0:
            joined = self.add("tessel/tcp_store/joined", 1)
            if is_master and wait_for_workers:
                import time
                deadline = time.monotonic() + timeout.total_seconds()
                while joined < world_size:
                    if time.monotonic() > deadline:
                        raise DistTimeoutError("TCPStore at %s:%d: %d of %d workers joined within %s"
                                           % (host_name, self.port, joined, world_size, timeout))
                    time.sleep(0.01)
                    joined = self.add("tessel/tcp_store/joined", 0)


class FileStore(Store):
    """Shared through the filesystem: torch names a file; tessel keeps one file per key in the directory
    file_name + ".d" (so a temporary file's name works as torch's does)."""

    def __init__(self, file_name, world_size=-1):
        super().__init__(_C._file_store(file_name + ".d"))
        self.path = file_name


class HashStore(Store):
    """In one process: its threads (tessel.run_ranks ranks) rendezvous through it."""

    def __init__(self):
        super().__init__(_C._hash_store())


class PrefixStore(Store):
    """Every key of `store` under "<prefix>/": groups or jobs sharing one store."""

    def __init__(self, prefix, store):
        super().__init__(_C._prefix_store(prefix, store._impl), store.timeout)
        self.underlying_store = store
        if hasattr(store, "host"):
            self.host = store.host  # the transport's address choice (init_process_group)
