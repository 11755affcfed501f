"""torch.distributed.Store and its kinds (TCPStore, FileStore, HashStore, PrefixStore) over the C++ stores of
comm/store.h: keys to bytes shared by the ranks, the rendezvous of init_process_group. Split from
distributed/__init__.py by concept; tessel.distributed re-exports every name.

    store = TCPStore("127.0.0.1", 0, world_size=1, is_master=True)
    store.set("k", b"v"); store.get("k")  # b"v"
"""
import datetime
import re
import shutil
import time
import uuid
import weakref

from .. import _C

DistTimeoutError, DistNetworkError, DistStoreError = _C.DistTimeoutError, _C.DistNetworkError, _C.DistStoreError

_DEFAULT_STORE_TIMEOUT = datetime.timedelta(seconds=300)


def _incompatible(method, signature, args):
    """The TypeError torch's bound methods raise for an argument of the wrong type (a str where a list of keys
    goes, an int value): scripts that catch it, or rely on it to reject such calls, see the same."""
    return TypeError("%s(): incompatible function arguments. The following argument types are supported:\n"
                     "    1. (self: torch._C._distributed_c10d.Store, %s)\n\nInvoked with: %s"
                     % (method, signature, ", ".join(repr(a) for a in args)))


def _text(value, method, signature, args):
    """A key or value as torch's str arguments take it: str, bytes or bytearray, nothing else."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "surrogateescape")
    raise _incompatible(method, signature, args)


def _as_bytes(value, method="set", signature="arg0: str, arg1: str) -> None", args=()):
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise _incompatible(method, signature, args or (value,))


def _keys(keys, method, signature):
    """A sequence of keys: a list or tuple of str (a lone str is refused, as torch's sequence argument does)."""
    if isinstance(keys, (str, bytes, bytearray)) or not hasattr(keys, "__iter__"):
        raise _incompatible(method, signature, (keys,))
    keys = list(keys)
    return [_text(k, method, signature, (keys,)) for k in keys]


def _network_error(e, timeout=None):
    """torch raises DistNetworkError when a TCPStore cannot bind its port or reach its server; tessel's C++
    store raises a deadline or precondition error for these. The same failure under torch's type, torch's
    sentence first, tessel's diagnosis (which rank, which variable) after it; None for any other error."""
    text = str(e)
    connect = re.search(r"tcp store: cannot connect to (.*):(\d+) \(", text)
    if connect:
        ms = "%dms" % int(timeout.total_seconds() * 1000) if timeout is not None else "the timeout"
        return DistNetworkError("The client socket has timed out after %s while trying to connect to (%s, %s). %s"
                                % (ms, connect.group(1), connect.group(2), text))
    listen = re.search(r"tcp store: cannot listen on port (\d+): ([^(]*)", text)
    if listen:
        why = listen.group(2).strip()
        code = ("code: -98, name: EADDRINUSE, message: address already in use" if "in use" in why
                else "message: %s" % why.lower())
        return DistNetworkError("The server socket has failed to listen on any local network address. port: %s, "
                                "useIpv6: false, %s. %s" % (listen.group(1), code, text))
    return None


class Store:
    """torch.distributed.Store: keys to bytes, shared by the ranks. get() and wait() wait up to the store's
    timeout (or wait's own) for a key, then raise DistTimeoutError (a DistStoreError) naming it; add() is atomic
    across clients and keeps the counter as decimal text (get() of it reads b"5", as torch's). Store() itself
    is the base a Python store subclasses (its own methods are not implemented, as torch's)."""

    def __init__(self, impl=None, timeout=_DEFAULT_STORE_TIMEOUT):
        self._impl, self._timeout = impl, timeout

    def _store(self, method):
        if self._impl is None:
            raise RuntimeError("Store.%s: not implemented (a subclass of Store defines it)" % method)
        return self._impl

    @property
    def timeout(self):
        return self._timeout

    def set(self, key, value):
        sig = "arg0: str, arg1: str) -> None"
        self._store("set").set(_text(key, "set", sig, (key, value)), _as_bytes(value, "set", sig, (key, value)))

    def get(self, key):
        return self._store("get").get(_text(key, "get", "arg0: str) -> bytes", (key,)), self.timeout)

    def add(self, key, amount):
        sig = "arg0: str, arg1: typing.SupportsInt) -> int"
        if isinstance(amount, (str, bytes, float)) or not hasattr(amount, "__index__"):
            raise _incompatible("add", sig, (key, amount))
        return self._store("add").add(_text(key, "add", sig, (key, amount)), int(amount))

    def check(self, keys):
        return self._store("check").check(_keys(keys, "check", "arg0: collections.abc.Sequence[str]) -> bool"))

    def wait(self, keys, timeout=None):
        sig = "arg0: collections.abc.Sequence[str]) -> None"
        keys = _keys(keys, "wait", sig)
        if timeout is not None and not isinstance(timeout, datetime.timedelta):
            raise _incompatible("wait", "arg0: collections.abc.Sequence[str], arg1: datetime.timedelta) -> None",
                                (keys, timeout))
        self._store("wait").wait(keys, self.timeout if timeout is None else timeout)

    def set_timeout(self, timeout):
        if not isinstance(timeout, datetime.timedelta):
            raise _incompatible("set_timeout", "arg0: datetime.timedelta) -> None", (timeout,))
        self._timeout = timeout

    def compare_set(self, key, expected_value, desired_value):
        """key becomes desired_value when it holds expected_value (or is absent and expected_value is empty);
        returns what it holds afterwards, atomically across clients (torch's)."""
        sig, args = "arg0: str, arg1: str, arg2: str) -> bytes", (key, expected_value, desired_value)
        return self._store("compare_set").compare_set(_text(key, "compare_set", sig, args),
                                                      _as_bytes(expected_value, "compare_set", sig, args),
                                                      _as_bytes(desired_value, "compare_set", sig, args))

    def delete_key(self, key):
        return self._store("delete_key").delete_key(_text(key, "delete_key", "arg0: str) -> bool", (key,)))

    def num_keys(self):
        """Keys in the store, every client's (internal rendezvous keys included, as torch's)."""
        return self._store("num_keys").num_keys()

    def multi_get(self, keys):
        """The values of keys, each waited for up to the store's timeout, in order."""
        keys = _keys(keys, "multi_get", "arg0: collections.abc.Sequence[str]) -> list[bytes]")
        return [self.get(k) for k in keys]

    def multi_set(self, keys, values):
        sig = "arg0: collections.abc.Sequence[str], arg1: collections.abc.Sequence[str]) -> None"
        keys = _keys(keys, "multi_set", sig)
        if isinstance(values, (str, bytes, bytearray)) or not hasattr(values, "__iter__"):
            raise _incompatible("multi_set", sig, (keys, values))
        values = [_as_bytes(v, "multi_set", sig, (keys, values)) for v in values]
        if len(keys) != len(values):
            raise ValueError("multi_set: %d keys and %d values" % (len(keys), len(values)))
        for k, v in zip(keys, values):
            self.set(k, v)

    def append(self, key, value):
        """value added to the end of key's bytes (key created when absent), atomic across clients. A lock key
        taken by compare_set serializes appenders: a read-then-compare_set alone could not tell two appenders
        of equal bytes apart."""
        sig = "arg0: str, arg1: str) -> None"
        key, tail = _text(key, "append", sig, (key, value)), _as_bytes(value, "append", sig, (key, value))
        lock, token = "tessel/append_lock/" + key, uuid.uuid4().hex.encode()
        deadline = time.monotonic() + self.timeout.total_seconds()
        while self.compare_set(lock, b"", token) != token:
            if time.monotonic() > deadline:
                raise DistStoreError("append: key '%s' stayed locked by another client for %s" % (key, self.timeout))
            time.sleep(0.001)
        try:
            head = self.get(key) if self.check([key]) else b""
            self.set(key, head + tail)
        finally:
            self.delete_key(lock)

    def has_extended_api(self):
        """Whether append / multi_get / multi_set are the store's own (torch's FileStore and a bare Store:
        False)."""
        return self._impl is not None

    def __repr__(self):
        return "%s(%r)" % (type(self).__name__, self._impl)


class TCPStore(Store):
    """Served by the process with is_master=True at (host_name, port); port 0 there picks a free one (read
    .port). Clients retry connecting until the timeout. With world_size and wait_for_workers, the master's
    constructor returns once world_size clients (itself included) have connected, as torch's. A port that
    cannot be bound, or a server that cannot be reached, raises DistNetworkError (torch's)."""

    def __init__(self, host_name, port, world_size=None, is_master=False, timeout=_DEFAULT_STORE_TIMEOUT,
                 wait_for_workers=True, multi_tenant=False, master_listen_fd=None, use_libuv=True):
        if not isinstance(timeout, datetime.timedelta):
            raise TypeError("__init__(): incompatible constructor arguments. The following argument types are "
                            "supported:\n    1. torch._C._distributed_c10d.TCPStore(host_name: str, port: int, "
                            "world_size: int | None = None, is_master: bool = False, timeout: datetime.timedelta "
                            "= ...)\n\nInvoked with: timeout=%r" % (timeout,))
        try:
            impl, self.port = _C._tcp_store(host_name, int(port), bool(is_master), timeout)
        except RuntimeError as e:
            network = _network_error(e, timeout)
            if network is None:
                raise
            raise network from None
        super().__init__(impl, timeout)
        self.host, self.libuvBackend = host_name, bool(use_libuv)
        if world_size is not None and world_size > 0:
            joined = self.add("tessel/tcp_store/joined", 1)
            if is_master and wait_for_workers:
                deadline = time.monotonic() + timeout.total_seconds()
                while joined < world_size:
                    if time.monotonic() > deadline:
                        raise DistStoreError("Timed out after %d seconds waiting for clients. %d/%d clients joined."
                                             % (round(timeout.total_seconds()), joined, world_size))
                    time.sleep(0.01)
                    joined = self.add("tessel/tcp_store/joined", 0)


# FileStore's bookkeeping keys (torch keeps its own out of the user's key space too; they count in num_keys)
_FILE_USERS, _FILE_DONE = "tessel/file_store/users", "tessel/file_store/done"


def _release_file_store(impl, folder, world_size):
    """The last FileStore object on a folder removes it once world_size of them have closed, as torch's removes
    its file: the next job on the same path (a fixed file:// path) starts without the last job's keys."""
    try:
        done = impl.add(_FILE_DONE, 1)
        users = impl.add(_FILE_USERS, -1)
    except Exception:  # noqa: BLE001 (the folder is already gone: another store removed it)
        return
    if users == 0 and 0 <= world_size <= done:
        shutil.rmtree(folder, ignore_errors=True)


class FileStore(Store):
    """Shared through the filesystem: torch names a file; tessel keeps one file per key in the directory
    file_name + ".d" (so a temporary file's name works as torch's does). With world_size, the folder is removed
    when world_size store objects have closed and none is left open (torch's cleanup of its file)."""

    def __init__(self, file_name, world_size=-1):
        folder = file_name + ".d"
        super().__init__(_C._file_store(folder))
        self.path = file_name
        self._impl.add(_FILE_USERS, 1)
        self._release = weakref.finalize(self, _release_file_store, self._impl, folder, int(world_size))

    def delete_key(self, key):
        super().delete_key(key)
        return True  # (torch's FileStore reports a deletion whether or not the key was there)

    def has_extended_api(self):
        return False


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

    def has_extended_api(self):
        return self.underlying_store.has_extended_api()
