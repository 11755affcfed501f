"""torch.distributed.Work (what a collective with async_op=True, isend and irecv return) and the deferred
point-to-point calls behind isend / irecv. Split from distributed/__init__.py by concept; tessel.distributed
re-exports Work.

A collective made of one async primitive and local copies (the list forms of all_gather, reduce_scatter and
all_to_all, gather, scatter, reduce, barrier, a collective over strided tensors) issues the primitive
(all_gather_into_tensor, all_reduce, reduce_scatter_tensor, all_to_all_single, broadcast) when called and does
its copy-outs when its Work is waited on or found completed, so with async_op=True it returns at once, as
torch's: rank 0's `w = all_gather(..., async_op=True); all_reduce(b, group=g); w.wait()` meets rank 1's
`all_reduce(b, group=g); all_gather(...)`.

    w = dist.all_gather(out, x, async_op=True)
    ...                       # other work, other groups
    w.wait()                  # out holds every rank's x now
"""
import threading

from .. import _C
from . import _local

# isend / irecv are deferred (per thread and group) and issued together, as one batch_isend_irecv, when one of them
# is waited on or polled, when any other communication runs on that group (the _collective wrapper, new_group,
# split_group, batch_isend_irecv; not queries such as get_rank), or when this thread is about to block on any
# group (a blocking collective, send / recv, a Work's wait(): rank 0's `w = isend(a, 1); recv(b, 1, group=g2)`
# needs its isend out, for rank 1 receives it before sending on g2). A group runs its calls one at a time in
# issue order, so torch's `isend(a, peer); irecv(b, peer); wait(); wait()` on both ranks of an exchange, issued
# one by one, would have each rank's send wait for a receive queued behind it; batched, both are in flight
# together. A send still completes only with its receive: post the matching irecv before another call on the
# group, or before a blocking call on another group (torch's gloo lets `isend; all_reduce; irecv` pass; here
# each rank's send waits for a receive queued behind it, and the ranks raise that deadlock, comm/wait_graph.h).
_p2p = threading.local()


class _DeferredP2P:
    def __init__(self, group):
        self._group, self._work = group, None

    def wait(self, timeout=None):
        _flush_all_p2p()  # (this group's batch included)
        self._work.wait()
        return True  # torch's Work.wait()

    def is_completed(self):
        _flush_p2p(self._group)
        return self._work.is_completed()

    def _source_rank(self):
        _flush_all_p2p()
        return self._work._source_rank()


def _defer_p2p(group, is_send, tensor, peer, tag):
    pending = getattr(_p2p, "pending", None)
    if pending is None:
        pending = _p2p.pending = {}
    entry = pending.setdefault(id(group), (group, [], []))
    handle = _DeferredP2P(group)
    entry[1].append((is_send, tensor, peer, int(tag)))
    entry[2].append(handle)
    return handle


def _pending_p2p(group):
    pending = getattr(_p2p, "pending", None)
    return bool(pending) and id(group) in pending


def _flush_p2p(group):
    """Issues what this thread deferred on `group` (None: the default group, if any), in its order."""
    group = group if group is not None else getattr(_local, "world", None)
    pending = getattr(_p2p, "pending", None)
    if not pending or id(group) not in pending:
        return
    g, ops, handles = pending.pop(id(group))
    work = g.batch_p2p(ops)
    for h in handles:
        h._work = work


def _flush_all_p2p():
    """Issues what this thread deferred on every group, before it blocks (a peer may wait for those sends before
    it joins the call this thread is about to wait in)."""
    pending = getattr(_p2p, "pending", None)
    while pending:
        _flush_p2p(next(iter(pending.values()))[0])


class _BoxedWork:
    """torch's Work.boxed(): an opaque holder of the Work (a ScriptObject there) that Work.unbox() opens."""

    def __init__(self, work):
        self._boxed = work


_NOT_A_RECV = ("sourceRank() may only be called on work objects that correspond to a recv or recv-from-any call.")


class Work:
    """What an async collective, isend and irecv return (torch's Work). wait() blocks until it completed (a
    composed collective's copy-outs done) and returns True; is_completed() polls; get_future() is a
    tessel.futures.Future of the list of its output tensors, as torch's; result(), is_success() and exception();
    source_rank() (the sender's group rank: irecv without src); synchronize() and block_current_stream() (nothing
    to order on the CPU); boxed() / Work.unbox(); get_future_result(), a Future of torch's WorkResult code (0
    success, 1 timeout, 2 communication error: NCCL's, which torch's gloo does not implement)."""

    def __init__(self, work, tensors, finish=None, source=None):
        # work: what is in flight (a _C.Work, a deferred p2p handle or another Work; None: nothing); finish: the
        # copy-outs, run once after it; source: the group rank a receive named
        self._work, self._tensors, self._finish, self._source, self._error = work, list(tensors), finish, source, None

    def _complete(self):
        """Waits for what is in flight, then runs the copy-outs once (their error again on each later call)."""
        if self._work is not None:
            if not self._work.is_completed():
                _flush_all_p2p()
            self._work.wait()
        finish, self._finish = self._finish, None
        if finish is not None:
            try:
                finish()
            except BaseException as e:  # noqa: B902 (kept for every waiter)
                self._error = e
        if self._error is not None:
            raise self._error

    def wait(self, timeout=None):
        self._complete()
        return True

    def is_completed(self):
        if self._work is not None and not self._work.is_completed():
            return False
        try:
            self._complete()  # the copy-outs: a completed Work's outputs are written
        except Exception:  # noqa: BLE001 (a failed Work is completed; exception() reports it)
            pass
        return True

    def is_success(self):
        """Whether it completed without an error (torch's deprecated Work.is_success)."""
        return self.is_completed() and self.exception() is None

    def exception(self):
        """The error it failed with once completed, or None."""
        if not self.is_completed():
            return None
        try:
            self._complete()
        except Exception as e:  # noqa: BLE001 (reported, as torch's Work.exception())
            return e
        return None

    def result(self):
        """The collective's result tensors once it completed (torch's Work.result())."""
        self._complete()
        return list(self._tensors)

    def get_future(self):
        from ..futures import Future
        return Future._lazy(lambda: (self._complete(), list(self._tensors))[1], self.is_completed)

    def get_future_result(self):
        from ..futures import Future

        def code():
            try:
                self._complete()
            except _C.DistTimeoutError:
                return 1
            except Exception:  # noqa: BLE001 (torch's WorkResult.COMM_ERROR)
                return 2
            return 0
        return Future._lazy(code, self.is_completed)

    def source_rank(self):
        """The group rank the receive came from (irecv(src=None): waits for the message)."""
        if self._source is not None:
            return self._source
        try:
            return self._work._source_rank()
        except (AttributeError, ValueError):
            raise _C.InvalidArgumentError(_NOT_A_RECV) from None  # torch's RuntimeError (and a ValueError)

    _source_rank = source_rank

    def synchronize(self):
        return None

    def block_current_stream(self):
        return None

    def boxed(self):
        return _BoxedWork(self)

    @staticmethod
    def unbox(obj):
        return obj._boxed


def _issue(work, outputs, finish, async_op):
    """A collective whose async primitive `work` is in flight: with async_op its Work (finish, the copy-outs, runs
    on wait), else waited on here (then finish) and None."""
    handle = Work(work, outputs, finish)
    if async_op:
        return handle
    handle.wait()
    return None
