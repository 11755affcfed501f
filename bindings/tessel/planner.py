"""tessel.planner — the ledger planner from Python: "which ledger blew up?" before a job runs.

For a decoder-only transformer (a preset, a GPT config, or any spec of its shapes) and a layout — the mesh
(pp, dp_replicate, dp_shard, tp), the pipeline schedule and microbatches, the ZeRO stage (3: fully_shard),
sequence / loss parallelism, activation checkpointing, dtypes, batch and sequence — each rank's peak bytes per
ledger (params, grads, optim, activations, comm: the ledgers tessel.memory_stats() counts), the bytes it sends
on each mesh axis per step and its FLOPs; against a per-rank budget, whether it fits and which ledger does not;
and the layouts of a world that fit, fastest first by a stated roofline. The same numbers as the command line
`bazel run //planner:plan` (planner/README.md says how each one is made). tessel-only: torch has no planner.

    from tessel import planner
    llama = planner.preset("llama-7b")
    layout = planner.Layout(dp_shard=8, global_batch=8, seq_len=4096)   # fully_shard (ZeRO-3) on 8 ranks
    plan = planner.plan_peak_rank(llama, layout)
    plan.ledgers["optim"]                        # bytes of AdamW's moments on the fullest rank
    planner.exceeds_budget(plan, "80GiB")        # None when it fits, else OverBudget("optim", ...)
    print(planner.format_plan(plan, "80GiB"))    # the table //planner:plan prints
    for c in planner.rank_layouts(llama, world=8, budget="80GiB")[:3]:
        print(c.layout, c.peak.ledgers["total"], c.step["step_s"])

A running job holds its plan against what it measured: `planner.plan_vs_measured(spec, layout, rank)` after a
step (tessel.memory_stats() of this rank) prints both side by side, ledger by ledger.
"""
from collections import namedtuple

from . import _C

_p = _C._planner

# Any decoder-only transformer by its shapes (keywords): vocab_size, d_model, n_layers, n_heads, ffn_hidden (the
# MLP's hidden width; 4 * d_model when None), max_seq_len, swiglu (w1, w3, w2 as LLaMA's instead of GPT-2's fc,
# proj), rmsnorm, bias, tie_embeddings, learned_positions (False: rotary, no wpe), flash_attention (no [s, s]
# score matrix saved: tessel's attention and torch's SDPA), dropout, name. preset() and from_gpt_config() make one.
ModelSpec = _p.ModelSpec
# One parallel layout (keywords): pp, dp_replicate, dp_shard, tp; zero_stage on dp_shard (0 DDP, 1 optimizer
# state, 2 + gradients, 3 + parameters: fully_shard; None: 3 when dp_shard > 1, else 0; dp_replicate always
# replicates: HSDP with dp_shard at stage 3); schedule "1f1b" or "gpipe"; num_microbatches; sequence_parallel;
# loss_parallel; ac "none", "selective" or "full"; param_dtype and reduce_dtype (bfloat16), optim_dtype (float32),
# master_weights; global_batch (sequences per step over all dp ranks; None: one per dp rank and microbatch);
# seq_len (4096); grad_bucket_bytes (DDP's bucket cap, ZeRO 0-2). str(layout) is the planner's short form.
Layout = _p.Layout
# The roofline's assumptions per rank (keywords; H100 SXM-like defaults): peak_flops (dense bf16),
# intra_node_bytes_per_s, inter_node_bytes_per_s, ranks_per_node.
Hardware = _p.Hardware
RankPlan = _p.RankPlan
# The ledger that most exceeds the budget on its own (alone=True), or else the largest one when only the total
# does (plan.ledgers' names: "params", "grads", "optim", "activations", "comm").
OverBudget = namedtuple("OverBudget", ["ledger", "bytes", "alone"])
# One fitting layout of rank_layouts: the layout, its fullest rank's plan, and the roofline step estimate of its
# slowest rank (estimate_step's dict, seconds).
Candidate = namedtuple("Candidate", ["layout", "peak", "step"])

PRESETS = tuple(_p.preset_names())


def preset(name):
    """A named model: "gpt2-small", "llama-7b", "llama-13b" or "tessel-gpt" (ValueError naming them otherwise)."""
    return _p.preset(name)


def from_gpt_config(config):
    """The spec of tessel.nn.GPT(config) (tessel.GPTConfig): tessel's own saved tensors, so fully_shard layouts of
    it get the exact plan (plan.exact) that the allocator's measured peaks are held to."""
    return _p.from_gpt_config(config)


def parse_bytes(budget):
    """A budget in bytes: an int, or text with a unit ("80GiB", "40GB", "512MiB"; ValueError otherwise)."""
    if isinstance(budget, bool) or not isinstance(budget, (int, str)):
        raise TypeError(f"budget: expected bytes as an int or text such as '80GiB', got {type(budget).__name__}")
    if isinstance(budget, int):
        if not 1 <= budget < 2**63:
            raise ValueError(f"budget={budget} is not a positive byte count below 8 EiB")
        return budget
    return _p.parse_bytes(budget, "budget")


def verify(layout, model, world=None):
    """Raises ValueError naming the field when `layout` cannot be planned for `model` on `world` ranks (default:
    the layout's own world size): the mesh must cover the world, heads / MLP width / sequence split over tp,
    layers over pp, the global batch over dp x microbatches."""
    _p.verify(layout, model, layout.world_size if world is None else world)


def _activations(measured_activations):
    if measured_activations is None:
        return -1
    if int(measured_activations) < 0:
        raise ValueError(f"measured_activations={measured_activations}: a byte count is >= 0 (None: not measured)")
    return int(measured_activations)


def _check_rank(layout, rank):
    if not 0 <= rank < layout.world_size:
        raise ValueError(f"rank {rank} is not a rank of the layout's {layout.world_size} ({layout})")


def plan_rank(model, layout, rank=0, measured_activations=None):
    """One rank's plan: .ledgers (peak bytes per ledger and the total), .axis_bytes (sent per step on each mesh
    axis), .flops, .coord (its mesh coordinate), .exact (the exact fully_shard plan of a GPT config).
    measured_activations (bytes, e.g. from measure_gpt_activations) feeds the exact plan's activations (only the
    exact plan uses it).

    Which plans are exact: a ModelSpec from from_gpt_config under fully_shard or HSDP (zero_stage 3 over dp_shard),
    every dtype float32, seq_len the config's, no tp / pp / checkpointing, one microbatch: every ledger equals
    tessel.nn.GPT's measured peaks to the byte (plan.exact). Otherwise the plan is analytic: parameters and
    gradients in param_dtype / reduce_dtype (fully_shard's MixedPrecisionPolicy keeps float32 shards, which no
    Layout describes), tensor parallelism as Megatron's recipe with vocabulary-parallel embedding and head
    (planner/README.md), the total a sum of the ledgers' peaks (an upper bound)."""
    _check_rank(layout, rank)
    return _p.plan_rank(model, layout, rank, _activations(measured_activations))


def plan_peak_rank(model, layout, measured_activations=None):
    """The plan of the rank with the largest total (the first of equals)."""
    return _p.plan_peak_rank(model, layout, _activations(measured_activations))


def exceeds_budget(plan, budget):
    """None when `plan` (a RankPlan) fits `budget` (bytes or "80GiB"), else the OverBudget ledger."""
    over = _p.exceeds_budget(plan, parse_bytes(budget))
    return None if over is None else OverBudget(*over)


def format_plan(plan, budget):
    """The per-ledger table (bytes, GiB, share of the budget), axis bytes, FLOPs and the verdict."""
    return _p.format_rank_plan(plan, parse_bytes(budget))


def plan_vs_measured(model, layout, rank=None, device_index=None):
    """The plan of `rank` (default: this process's or rank thread's rank) next to the ledger peaks this rank
    measured (tessel.memory_stats()), ledger by ledger with their ratios; call it after a steady-state step
    (tessel.reset_peak_memory_stats() before it)."""
    if rank is None:
        from . import distributed as dist
        rank = dist.get_rank() if dist.is_initialized() else 0
    verify(layout, model)
    _check_rank(layout, rank)
    if device_index is not None and int(device_index) < 0:
        raise ValueError(f"device_index={device_index} is not a CPU device index")
    return _p.rank_plan_vs_measured(model, layout, rank, -1 if device_index is None else int(device_index))


def measure_gpt_activations(config, local_batch, ac="none"):
    """The activations ledger's peak of one unsharded forward + backward of tessel.nn.GPT(config) on local_batch
    sequences (it runs that step on a thread of its own: call it before rank threads start). ac: "none",
    "full", "selective" or "gemm" checkpointing of every block."""
    if local_batch < 1:
        raise ValueError(f"measure_gpt_activations: local_batch must be >= 1, got {local_batch}")
    return _p.measure_gpt_activations(config, local_batch, ac)


def step_flops(model, layout, stage=0):
    """FLOPs per step of a rank of pipeline stage `stage` (3x the forward's GEMMs, plus recomputation)."""
    return _p.step_flops(model, layout, stage)


def estimate_step(plan, layout, hardware=None):
    """The roofline step estimate of a plan, in seconds: {"step_s", "compute_s", "bubble", "tp_s", "pp_s",
    "dp_s"} (planner/roofline.h states the formula)."""
    return _p.estimate_step(plan, layout, Hardware() if hardware is None else hardware)


def rank_layouts(model, world, budget, base=None, micro_batch=1, hardware=None):
    """Every layout of `world` ranks whose fullest rank fits `budget`, fastest estimated step first, as
    Candidate(layout, peak, step) (peak: the fullest rank's plan; step: the slowest rank's estimate): pp and tp
    over the divisors of world, the rest dp_replicate x dp_shard, ZeRO 0-3, sequence parallelism with tp,
    checkpointing none / selective / full; `base` gives the schedule, dtypes, batch and sequence (default:
    Layout(global_batch=world * micro_batch, seq_len=the model's max_seq_len), as //planner:plan). An empty list
    means nothing fits the budget: a base whose sequence the model cannot take is a ValueError instead."""
    if base is None:
        base = Layout(global_batch=world * micro_batch, seq_len=model.max_seq_len)
    found = _p.rank_layouts(model, world, base, micro_batch, Hardware() if hardware is None else hardware,
                            parse_bytes(budget))
    return [Candidate(*c) for c in found]
