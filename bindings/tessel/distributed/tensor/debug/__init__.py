"""tessel.distributed.tensor.debug: torch's CommDebugMode, the collectives issued inside a `with` block counted by
kind and attributed to the modules whose forward (or backward) issued them.

    comm_mode = CommDebugMode()
    with comm_mode:
        model(x).sum().backward()
    comm_mode.get_total_counts()                                   # 4
    comm_mode.get_comm_counts()[tessel.ops.c10d_functional.all_reduce]
    comm_mode.get_comm_module_counts()["mlp.down"]["forward"]     # {c10d_functional.all_reduce: 1}
    print(comm_mode.generate_comm_debug_tracing_table(noise_level=0))

Counts come from the comm tracer of this thread (a run_ranks rank, or the process): every collective of any
layer (DTensor redistributes, fully_shard, tessel.distributed's calls), keyed by torch's functional op handles
(all_reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single, broadcast); a tessel.distributed
call's (dist.all_reduce, dist.broadcast, ...) by torch's c10d op (c10d.allreduce_, c10d.broadcast_,
c10d._allgather_base_, ...), as torch keys them, and so are distribute_tensor's (c10d.scatter_ / broadcast_) and
DTensor.from_local(run_check=True)'s (c10d._allgather_base_ / broadcast_). Sends, receives and barriers are not
counted, as torch's. Module attribution follows module calls made from Python (the global forward hooks of
tessel.nn.modules.module); backward collectives go to the module whose output gradient arrived last, as torch's
tracker attributes them, and to its ancestors and "Global". Not kept: per-op DTensor dispatch traces (noise
levels above 0 print the module tree with parameter placements, not the ops).
"""
from .... import _C, ops
from ... import _comm_debug

__all__ = ["CommDebugMode", "visualize_sharding"]

# Point-to-point sends / receives and barriers are not counted: torch's CommDebugMode counts only its functional
# collectives and the c10d collectives (allreduce_, broadcast_, scatter_, ...).
_KINDS = {"all_reduce": ops.c10d_functional.all_reduce, "all_gather": ops.c10d_functional.all_gather_into_tensor,
          "reduce_scatter": ops.c10d_functional.reduce_scatter_tensor,
          "all_to_all": ops.c10d_functional.all_to_all_single, "broadcast": ops.c10d_functional.broadcast}
_FUNCTIONAL = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


class CommDebugMode:
    def __init__(self):
        self.comm_counts = {}
        self.comm_module_counts = {}
        self._tracer = None
        self._stack = ["Global"]  # forward: the modules being called, outermost first
        self._bw_path = None      # backward: the module path whose output gradient arrived last
        self._roots = {}
        self._params = {}
        self._handles = []
        self._seen = 0

    # ---- counting ----

    def _drain(self, c10d_op=None):
        """Attributes the collectives recorded since the last drain to the current module path; c10d_op: they
        came from a tessel.distributed call (dist.all_reduce, ...), which torch counts under its c10d op
        (c10d.allreduce_, ...: tessel.distributed's _run_keyed), not the c10d_functional one; or a dict of
        such ops by (kind, group name) or (kind, None) (distribute_tensor: scatter_ along a Shard mesh dim,
        broadcast_ along a Replicate one, as torch's)."""
        if self._tracer is None:
            return
        new = self._tracer.records(self._seen)  # only what came since the last drain (this runs per module call)
        self._seen += len(new)
        path = self._bw_path if self._bw_path is not None else list(self._stack)
        phase = "backward" if self._bw_path is not None else "forward"
        for kind, group, _ in new:
            if isinstance(c10d_op, dict):
                op = c10d_op.get((kind, group), c10d_op.get((kind, None), _KINDS.get(kind)))
            else:
                op = c10d_op if c10d_op is not None and kind in _FUNCTIONAL else _KINDS.get(kind)
            if op is None or op is ops.c10d.barrier:  # (dist.barrier: not counted, as torch)
                continue
            self.comm_counts[op] = self.comm_counts.get(op, 0) + 1
            for fqn in path:
                counts = self.comm_module_counts.setdefault(fqn, {"forward": {}, "backward": {}})[phase]
                counts[op] = counts.get(op, 0) + 1

    def get_total_counts(self):
        self._drain()
        return sum(self.comm_counts.values())

    def get_comm_counts(self):
        self._drain()
        return dict(self.comm_counts)

    def get_comm_module_counts(self):
        self._drain()
        return {k: {"forward": dict(v["forward"]), "backward": dict(v["backward"])}
                for k, v in self.comm_module_counts.items()}

    def get_parameter_info(self):
        return {k: dict(v) for k, v in self._params.items()}

    def get_sharding_info(self):
        return {"%s.%s" % (m, n): p.placements for m, ps in self._params.items() for n, p in ps.items()
                if getattr(p, "is_distributed", False)}

    # ---- module tracking ----

    def _child_name(self, module):
        """torch's module names: the outermost module called inside the context by its class name, its
        submodules as "<Class>.<fqn>"."""
        for root, root_name in self._roots.values():
            for fqn, m in root.named_modules():
                if m is module:
                    return root_name + ("." + fqn if fqn else "")
        self._roots[id(module)] = (module, type(module).__name__)
        return type(module).__name__

    def _pre(self, module, args):
        self._drain()
        if self._bw_path is not None:
            self._bw_path = None  # a forward after a backward (the next step, or a recompute)
        name = self._child_name(module)
        self._params.setdefault(name, {n: p for n, p in module.named_parameters(recurse=False)})
        self._stack.append(name)

    def _post(self, module, args, out):
        self._drain()
        path = list(self._stack)
        self._stack.pop()
        tensors = []
        from ....nn.modules import _flatten_output
        _flatten_output(out, tensors)
        for t in tensors:
            if isinstance(t, _C.Tensor) and t.requires_grad:
                t.register_hook(self._backward_hook(path))

    def _backward_hook(self, path):
        def hook(grad):
            self._drain()
            self._bw_path = path
        return hook

    # ---- report ----

    def generate_comm_debug_tracing_table(self, noise_level=3):
        """Per module (indented by depth), its forward and backward collective counts; noise_level >= 1 adds each
        module's parameters and their placements."""
        self._drain()
        lines = []
        for fqn in ["Global"] + [f for f in self._order if f != "Global"]:
            depth = 0 if fqn == "Global" else fqn.count(".") + 1
            counts = self.comm_module_counts.get(fqn)
            if counts is None and noise_level < 1:
                continue
            lines.append("  " * depth + fqn)
            if noise_level >= 1:
                for n, p in self._params.get(fqn, {}).items():
                    placement = ", ".join(repr(x) for x in p.placements) if getattr(p, "is_distributed", False) else \
                        "plain"
                    lines.append("  " * (depth + 1) + "%s: %s" % (n, placement))
            for phase in ("forward", "backward"):
                for op, n in (counts or {}).get(phase, {}).items():
                    lines.append("  " * (depth + 1) + "*%s: %s x%d" % (phase.upper(), op, n))
        return "\n".join(lines) + "\n"

    def log_comm_debug_tracing_table_to_file(self, file_name="comm_mode_log.txt", noise_level=3):
        with open(file_name, "w") as f:
            f.write(self.generate_comm_debug_tracing_table(noise_level))

    @property
    def _order(self):
        return list(dict.fromkeys(list(self._params) + list(self.comm_module_counts)))

    def __enter__(self):
        from ....nn.modules import register_module_forward_hook, register_module_forward_pre_hook
        self.comm_counts, self.comm_module_counts, self._params, self._roots = {}, {}, {}, {}
        self._stack, self._bw_path, self._seen = ["Global"], None, 0
        self._tracer = _C.CommTracer()
        self._tracer.__enter__()
        _comm_debug.__dict__.setdefault("modes", []).append(self)
        self._handles = [register_module_forward_pre_hook(self._pre), register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        self._drain()
        _comm_debug.modes.remove(self)
        for h in self._handles:
            h.remove()
        self._tracer.__exit__(None, None, None)
        self._tracer = None
        return False


from ._visualize_sharding import visualize_sharding  # noqa: E402,F401
