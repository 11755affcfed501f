"""tessel.futures: torch.futures.Future, what a DDP communication hook returns and Work.get_future() gives.

A Future completes once: set_result / set_exception, or, for one made from an async collective
(Work.get_future()) or by then(), when somebody waits on it: its value is computed on the waiting thread
(tessel runs no callback thread). wait() returns the value (or raises the exception); value() does the same
on a completed future and raises RuntimeError on one that is not; then(callback) is a future of
callback(this future), so a hook can chain the reduction's result:

    fut = dist.all_reduce(t, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])
"""
import threading


class Future:
    def __init__(self, *, devices=None):
        self._cond = threading.Condition()
        self._done = False
        self._value = None
        self._exception = None
        self._resolve = None  # a lazy future's computation (run once, by the first waiter)
        self._ready = None    # whether that computation would not block
        self._callbacks = []

    @classmethod
    def _lazy(cls, resolve, ready):
        f = cls()
        f._resolve, f._ready = resolve, ready
        return f

    def _run(self):
        with self._cond:
            resolve, self._resolve = self._resolve, None
        if resolve is None:
            return
        try:
            value = resolve()
        except BaseException as e:  # noqa: B902 (delivered to every waiter, as torch's)
            self.set_exception(e)
        else:
            self.set_result(value)

    def done(self):
        if not self._done and self._resolve is not None and self._ready is not None and self._ready():
            self._run()
        return self._done

    def wait(self):
        self._run()
        with self._cond:
            self._cond.wait_for(lambda: self._done)
        if self._exception is not None:
            raise self._exception
        return self._value

    def value(self):
        if not self.done():
            raise RuntimeError("Future.value(): the future has not completed (call wait())")
        return self.wait()

    def _complete(self, value, exception):
        with self._cond:
            if self._done:
                raise RuntimeError("Future can only be marked completed once")
            self._value, self._exception, self._done = value, exception, True
            callbacks, self._callbacks = self._callbacks, []
            self._cond.notify_all()
        for cb in callbacks:
            cb(self)

    def set_result(self, result):
        self._complete(result, None)

    def set_exception(self, result):
        if not isinstance(result, BaseException):
            raise TypeError("set_exception: %r is not an exception" % (result,))
        self._complete(None, result)

    def then(self, callback):
        """A future of callback(self), computed once this one completed."""
        def resolve():
            self.wait()
            return callback(self)
        return Future._lazy(resolve, self.done)

    def add_done_callback(self, callback):
        """callback(self) once completed (at once if it is)."""
        with self._cond:
            if not self._done:
                self._callbacks.append(callback)
                return
        callback(self)


def collect_all(futures):
    """A future of the list of `futures`, completed when all are."""
    futures = list(futures)

    def resolve():
        for f in futures:
            f.wait()
        return futures
    return Future._lazy(resolve, lambda: all(f.done() for f in futures))


def wait_all(futures):
    """Every future's value, in order (the first exception raised)."""
    return [f.wait() for f in futures]
