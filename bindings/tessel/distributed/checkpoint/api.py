"""torch.distributed.checkpoint.api: CheckpointException, what save and load raise on every rank when
any rank failed (torch's type, interface and text)."""
import re
import traceback

__all__ = ["CheckpointException"]


class CheckpointException(BaseException):
    """Raised on every rank when save or load failed on one or more ranks. `failures` maps each failing
    rank (of the process group) to (its exception, its traceback as a traceback.StackSummary). A
    BaseException, as torch's: `except Exception` does not catch it."""

    def __init__(self, msg, failures):
        super().__init__(msg, failures)
        self._failures = failures

    @property
    def failures(self):
        """Failing rank -> (exception, traceback.StackSummary)."""
        return self._failures

    def __str__(self):
        out = "CheckpointException ranks:%s\n" % (self._failures.keys(),)
        for rank, failure in self._failures.items():
            exc, trace = failure if isinstance(failure, tuple) and len(failure) == 2 else (failure, None)
            if not isinstance(exc, BaseException):  # (a caller's own failures mapping: show what it holds)
                exc = RuntimeError(repr(exc))
            out += "Traceback (most recent call last): (RANK %s)\n" % rank
            if trace is not None:
                out += "".join(traceback.format_list(trace))
            out += "".join(traceback.format_exception_only(type(exc), exc))
        return out


def _wrap_exception(exc):
    """(exc, its StackSummary), picklable: frames keep no code objects (torch strips them too)."""
    summary = traceback.extract_tb(exc.__traceback__)
    for frame in summary:
        if hasattr(frame, "_code"):
            object.__setattr__(frame, "_code", None)
    return exc, summary


# A rank that did not fail itself gets this from the C++ save (checkpoint/internal/save_engine.cc), naming
# the first rank that did.
_PEER_FAILED = re.compile(r"^checkpoint save: rank (\d+) failed while .*\(this is rank (\d+);", re.S)


class _PeerFailed(RuntimeError):
    """Raised on a rank that did not fail itself when a peer's failure stops the step (the peer's rank in
    `.rank`): agreement names the peer, not this rank."""

    def __init__(self, rank, message):
        super().__init__(message)
        self.rank = rank


def _peer_echo(error):
    """The failing peer's rank when `error` only reports that a peer failed, else None."""
    if isinstance(error, _PeerFailed):
        return error.rank
    m = _PEER_FAILED.match(str(error.args[0]) if error.args else str(error))
    return int(m.group(1)) if m and m.group(1) != m.group(2) else None


def _raise_agreed(step, error, world, rank):
    """Raises CheckpointException on every rank of `world` when any rank's `step` failed (`error`: this
    rank's exception or None; every rank calls this). The ranks exchange their own failures, so each
    names all failing ranks; when the exchange itself fails (the group is broken or a peer is gone), a
    rank names what it knows."""
    own = None if error is None or _peer_echo(error) is not None else error
    failures = None
    if world is not None and world.size > 1:
        from ... import distributed as dist
        mine = None
        if own is not None:
            mine = _wrap_exception(own)
            try:
                import pickle
                pickle.dumps(mine)
            except Exception:  # noqa: BLE001 (an exception that does not pickle travels as its text)
                mine = (RuntimeError("%s: %s" % (type(own).__name__, own)), mine[1])
        gathered = [None] * world.size
        try:
            dist.all_gather_object(gathered, mine, group=world)
            failures = {r: f for r, f in enumerate(gathered) if f is not None}
        except Exception as exchange:  # noqa: BLE001 (the group failed too: report this rank's view below)
            if error is None:  # this rank's part went well, but a peer failed or died before agreeing on it: its
                # model is not known to match its peers' (it returned as if all had, and failed at the next call)
                failures = {rank: _wrap_exception(exchange)}
                raise CheckpointException(step, failures) from exchange
            failures = None
        bad = {r: f for r, f in (failures or {}).items()
               if not (isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], BaseException))}
        if bad:  # a peer's exchange of another checkpoint call (dcp.save on one rank, dcp.load on another)
            r, f = next(iter(bad.items()))
            failures = {r: _wrap_exception(RuntimeError(
                "%s: rank %d is not in the same checkpoint call (it sent %r where this rank's %s agreement expected "
                "a failure or None): every rank must call dcp.save, or every rank dcp.load, together" %
                (step, r, f if len(repr(f)) < 120 else type(f).__name__, step)))}
    if failures is None and error is not None:
        peer = _peer_echo(error)
        failures = {rank if peer is None else peer: _wrap_exception(error)}
    if failures:
        raise CheckpointException(step, failures) from error
