"""tessel.distributed.checkpoint.staging: torch's stagers for async_save. A stager makes a "training-safe"
copy of the state dict before the write starts. tessel's async_save snapshots each rank's shards itself
before it returns, so a DefaultStager adds no second copy there (its options choose async_save's return
type, as torch's: with use_async_staging an AsyncSaveResponse, else a Future); another AsyncStager's
stage() is called and its copy saved (BlockingAsyncStager's: a detached copy, made before async_save returns).
DefaultStager.stage also works on its own (a detached copy of every tensor)."""
import concurrent.futures
import dataclasses

from ... import _C

__all__ = ["AsyncStager", "StagingOptions", "DefaultStager", "BlockingAsyncStager"]


class AsyncStager:
    """torch's protocol of an async_save stager."""
    _synchronize_after_execute = True

    @property
    def should_synchronize_after_execute(self):
        return self._synchronize_after_execute

    def stage(self, state_dict):
        raise NotImplementedError("%s must implement stage method" % type(self).__name__)

    def synchronize_staging(self):
        """When stage() is asynchronous: waits until the copy is complete."""

    def close(self):
        """Releases the stager's resources."""


@dataclasses.dataclass
class StagingOptions:
    """torch's: use_pinned_memory and use_shared_memory change nothing on the CPU; use_non_blocking_copy
    needs an accelerator (AssertionError, as torch's without one); use_async_staging makes stage() return a
    Future and async_save an AsyncSaveResponse."""
    use_pinned_memory: bool = True
    use_shared_memory: bool = True
    use_async_staging: bool = True
    use_non_blocking_copy: bool = True


def _copy(state_dict):
    """The state dict with every tensor detached and cloned (the rest as it is)."""
    from ...utils._pytree import tree_map_only
    with _C._GradMode(False):
        return tree_map_only(_C.Tensor, lambda t: t.detach().clone(), state_dict)


class DefaultStager(AsyncStager):
    """torch's DefaultStager on the CPU."""

    def __init__(self, config=None):
        self._config = config if config is not None else StagingOptions()
        if self._config.use_non_blocking_copy:
            raise AssertionError("Non-blocking copy requires that the current accelerator is available.")
        self._executor = (concurrent.futures.ThreadPoolExecutor(max_workers=1)
                          if self._config.use_async_staging else None)
        self._future = None

    def stage(self, state_dict, **kwargs):
        """A copy of state_dict with every tensor detached and cloned (a Future of it with
        use_async_staging)."""
        if self._executor is None:
            return _copy(state_dict)
        self._future = self._executor.submit(_copy, state_dict)
        return self._future

    def synchronize_staging(self):
        if self._future is not None:
            self._future.result()

    def close(self):
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


class BlockingAsyncStager(AsyncStager):
    """torch's stager that copies the state dict before returning (synchronize_staging has nothing to wait for).
    cache_staged_state_dict is kept; each stage makes a fresh copy (torch's refills a cached one: the values
    are the same, only the buffers' reuse differs)."""
    _synchronize_after_execute = False

    def __init__(self, cache_staged_state_dict=False, type_check=False):
        self.cache_staged_state_dict = cache_staged_state_dict
        self.type_check = type_check
        self.state_dict_cache = None

    def stage(self, state_dict):
        return _copy(state_dict)

    def synchronize_staging(self):
        pass

    def close(self):
        pass
