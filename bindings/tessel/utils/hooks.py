"""torch.utils.hooks: RemovableHandle, the handle register_*_hook functions return (optimizer hooks here; modules
keep tessel.nn's own handle). remove() takes the hook out of the dict it was registered in; a handle works as a
context manager."""
import weakref


class RemovableHandle:
    next_id = 0

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        self.extra_dict_ref = tuple(weakref.ref(d) for d in (
            [] if extra_dict is None else extra_dict if isinstance(extra_dict, list) else [extra_dict]))

    def remove(self):
        for ref in (self.hooks_dict_ref,) + self.extra_dict_ref:
            d = ref()
            if d is not None and self.id in d:
                del d[self.id]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
