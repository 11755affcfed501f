"""Shared case list for the DTensor placement sweep. Backend-agnostic: every op is written against a module
handle T (torch or tessel), F (its nn.functional) and the DTensor API, so the SAME case ids / inputs run on both.

A case: (name, specs, fn). specs: one entry per DTensor input: (kind, shape) with kind in
'f' (float32 values, multiples of 1/4), 'pos' (positive floats), 'idx<H>' (int64 in [0, H)), 'bool'.
fn(T, F, *dtensors) -> output (DTensor / tuple / list / other).
The sweep enumerates placements for each input over the mesh (see placement_choices).
"""

import itertools
import numpy as np


def make_full(kind, shape, i):
    n = int(np.prod(shape)) if len(shape) else 1
    a = np.arange(n, dtype=np.int64)
    if kind == "f":
        v = (((a * 7 + 3 * i + 1) % 11) - 5).astype(np.float32) / 4
    elif kind == "pos":
        v = (((a * 7 + 3 * i + 1) % 11) + 1).astype(np.float32) / 4
    elif kind.startswith("idx"):
        h = int(kind[3:])
        v = (a * 5 + i) % h
    elif kind == "bool":
        v = ((a * 3 + i) % 5) > 1
    else:
        raise ValueError(kind)
    return v.reshape(shape)


def partial_c(shape):
    n = int(np.prod(shape)) if len(shape) else 1
    a = np.arange(n, dtype=np.int64)
    return ((((a * 5 + 1) % 7) - 3).astype(np.float32) / 2).reshape(shape)


def local_piece(full, mesh_shape, coord, toks):
    """This rank's piece: torch.chunk semantics for Shard, and for Partial(sum) rank-coordinate 0 holds
    x - (k-1)*c and the others c (exact in float32), so both backends get identical locals."""
    x = full
    for md, tok in enumerate(toks):
        k = mesh_shape[md]
        if tok.startswith("S"):
            d = int(tok[1:])
            pieces = _chunk(x, k, d)
            x = pieces[coord[md]]
        elif tok == "P":
            c = partial_c(x.shape)
            x = (x - (k - 1) * c).astype(np.float32) if coord[md] == 0 else c
        elif tok == "R":
            pass
    return np.ascontiguousarray(x)


def _chunk(x, k, d):
    size = x.shape[d]
    step = -(-size // k) if size else 0
    out = []
    for j in range(k):
        lo = min(j * step, size)
        hi = min(lo + step, size)
        out.append(np.take(x, range(lo, hi), axis=d))
    return out


def placement_choices(kind, ndim, mesh_shape, reduced):
    one = ["S%d" % d for d in range(ndim)] + ["R"]
    if kind in ("f", "pos"):
        one.append("P")
    if len(mesh_shape) == 1:
        return [(t,) for t in one]
    allc = list(itertools.product(one, repeat=len(mesh_shape)))
    if not reduced:
        return allc
    keep = [("S0", "S1"), ("S1", "S0"), ("R", "S0"), ("S0", "R"), ("R", "R"), ("P", "S0"), ("S0", "P"), ("P", "P")]
    out = []
    for c in keep:
        if c in allc and c not in out:
            out.append(c)
    return out


F2, F3 = (4, 8), (4, 4, 8)


def build_cases():
    C = []

    def add(name, specs, fn, group=None):
        C.append((name, specs, fn))

    f2 = [("f", F2)]
    f3 = [("f", F3)]
    # ---------------- pointwise unary ----------------
    un = {
        "neg": lambda T, F, x: -x,
        "abs": lambda T, F, x: x.abs(),
        "exp": lambda T, F, x: x.exp(),
        "relu": lambda T, F, x: F.relu(x),
        "gelu": lambda T, F, x: F.gelu(x),
        "silu": lambda T, F, x: F.silu(x),
        "sigmoid": lambda T, F, x: T.sigmoid(x),
        "tanh": lambda T, F, x: T.tanh(x),
        "square_pow2": lambda T, F, x: x**2,
        "pow_1": lambda T, F, x: T.pow(x, 1),
        "mul_scalar": lambda T, F, x: x * 2.0,
        "rmul_scalar": lambda T, F, x: 3 * x,
        "div_scalar": lambda T, F, x: x / 2.0,
        "add_scalar": lambda T, F, x: x + 1.0,
        "rsub_scalar": lambda T, F, x: 2.0 - x,
        "sub_scalar": lambda T, F, x: x - 0.5,
        "add_zero_scalar": lambda T, F, x: x + 0,
        "clamp": lambda T, F, x: T.clamp(x, min=-0.5, max=0.5),
        "clamp_min": lambda T, F, x: x.clamp(min=0.0),
        "gt_scalar": lambda T, F, x: x > 0,
        "eq_scalar": lambda T, F, x: x == 0.25,
        "isnan": lambda T, F, x: T.isnan(x),
        "sign": lambda T, F, x: T.sign(x),
        "dropout_eval": lambda T, F, x: F.dropout(x, p=0.5, training=False),
        "to_float64": lambda T, F, x: x.to(T.float64),
        "to_bf16": lambda T, F, x: x.to(T.bfloat16),
        "double": lambda T, F, x: x.double(),
        "long": lambda T, F, x: x.long(),
        "bool_to_float": lambda T, F, x: (x > 0).float(),
        "zeros_like": lambda T, F, x: T.zeros_like(x),
        "ones_like": lambda T, F, x: T.ones_like(x),
        "full_like": lambda T, F, x: T.full_like(x, 3.0),
        "empty_like_shape": lambda T, F, x: T.empty_like(x),
        "clone": lambda T, F, x: x.clone(),
        "contiguous": lambda T, F, x: x.contiguous(),
        "detach": lambda T, F, x: x.detach(),
        "nan_to_num": lambda T, F, x: T.nan_to_num(x),
    }
    for k, fn in un.items():
        add(k, f2, fn)
    for k in ("neg", "mul_scalar", "add_scalar", "exp"):
        add(k + "_3d", f3, un[k])
    add("sqrt_pos", [("pos", F2)], lambda T, F, x: T.sqrt(x))
    add("log_pos", [("pos", F2)], lambda T, F, x: T.log(x))
    add("rsqrt_pos", [("pos", F2)], lambda T, F, x: T.rsqrt(x))
    add("reciprocal_pos", [("pos", F2)], lambda T, F, x: x.reciprocal())
    add("logical_not", [("bool", F2)], lambda T, F, m: T.logical_not(m))
    add("bool_any", [("bool", F2)], lambda T, F, m: m.any())
    add("bool_all_dim", [("bool", F2)], lambda T, F, m: m.all(dim=1))
    # ---------------- pointwise binary ----------------
    bi = {
        "add": lambda T, F, x, y: x + y,
        "sub": lambda T, F, x, y: x - y,
        "mul": lambda T, F, x, y: x * y,
        "div": lambda T, F, x, y: x / (y.abs() + 1),
        "maximum": lambda T, F, x, y: T.maximum(x, y),
        "add_alpha": lambda T, F, x, y: T.add(x, y, alpha=2),
        "gt": lambda T, F, x, y: x > y,
        "eq": lambda T, F, x, y: T.eq(x, y),
        "where": lambda T, F, x, y: T.where(x > 0, x, y),
        "atan2": lambda T, F, x, y: T.atan2(x, y),
        "lerp": lambda T, F, x, y: T.lerp(x, y, 0.5),
    }
    for k, fn in bi.items():
        add(k, [("f", F2), ("f", F2)], fn)
    add("add_bcast_row", [("f", F2), ("f", (8,))], lambda T, F, x, y: x + y)
    add("mul_bcast_row", [("f", F2), ("f", (8,))], lambda T, F, x, y: x * y)
    add("mul_bcast_col", [("f", F2), ("f", (4, 1))], lambda T, F, x, y: x * y)
    add("add_bcast_3d_2d", [("f", F3), ("f", (4, 8))], lambda T, F, x, y: x + y)
    add("mul_3d", [("f", F3), ("f", F3)], lambda T, F, x, y: x * y)
    add("masked_fill", [("f", F2), ("bool", F2)], lambda T, F, x, m: x.masked_fill(m, 0.0))
    add("masked_fill_neg", [("f", F2), ("bool", F2)], lambda T, F, x, m: x.masked_fill(m, -1.0))
    add("where_mask", [("bool", F2), ("f", F2), ("f", F2)], lambda T, F, m, x, y: T.where(m, x, y))
    add("where_scalar_other", [("bool", F2), ("f", F2)], lambda T, F, m, x: T.where(m, x, 0.0))
    add("logical_and", [("bool", F2), ("bool", F2)], lambda T, F, a, b: T.logical_and(a, b))
    add("addcmul", [("f", F2), ("f", F2), ("f", F2)], lambda T, F, a, b, c: T.addcmul(a, b, c, value=0.5))
    # ---------------- reductions ----------------
    red = {
        "sum_all": lambda T, F, x: x.sum(),
        "sum_d0": lambda T, F, x: x.sum(0),
        "sum_d1": lambda T, F, x: x.sum(1),
        "sum_d1_keep": lambda T, F, x: x.sum(1, keepdim=True),
        "sum_dims01": lambda T, F, x: x.sum((0, 1)),
        "mean_all": lambda T, F, x: x.mean(),
        "mean_d0": lambda T, F, x: x.mean(0),
        "mean_d1": lambda T, F, x: x.mean(1),
        "mean_d1_keep": lambda T, F, x: x.mean(1, keepdim=True),
        "mean_dims01": lambda T, F, x: x.mean((0, 1)),
        "amax_all": lambda T, F, x: x.amax(),
        "amax_d1": lambda T, F, x: x.amax(1),
        "amax_d0_keep": lambda T, F, x: x.amax(0, keepdim=True),
        "amin_d0": lambda T, F, x: x.amin(0),
        "max_all": lambda T, F, x: x.max(),
        "min_all": lambda T, F, x: x.min(),
        "max_d1": lambda T, F, x: tuple(x.max(1)),
        "max_d0_keep": lambda T, F, x: tuple(x.max(0, keepdim=True)),
        "min_d1": lambda T, F, x: tuple(x.min(1)),
        "argmax_d1": lambda T, F, x: x.argmax(1),
        "argmax_d0": lambda T, F, x: x.argmax(0),
        "argmax_all": lambda T, F, x: x.argmax(),
        "argmin_d1": lambda T, F, x: x.argmin(1),
        "prod_d1": lambda T, F, x: x.prod(1),
        "prod_all": lambda T, F, x: x.prod(),
        "norm_all": lambda T, F, x: x.norm(),
        "norm_d1": lambda T, F, x: x.norm(dim=1),
        "norm_d0_p1": lambda T, F, x: x.norm(p=1, dim=0),
        "linalg_vector_norm": lambda T, F, x: T.linalg.vector_norm(x, dim=1),
        "var_d1": lambda T, F, x: x.var(1),
        "var_all": lambda T, F, x: x.var(),
        "std_d0": lambda T, F, x: x.std(0),
        "var_d1_unbiased0": lambda T, F, x: x.var(1, unbiased=False),
        "logsumexp_d1": lambda T, F, x: T.logsumexp(x, 1),
        "logsumexp_d0": lambda T, F, x: T.logsumexp(x, 0),
        "all_gt0": lambda T, F, x: (x > 0).all(),
        "any_gt0_d1": lambda T, F, x: (x > 0).any(1),
        "cumsum_d1": lambda T, F, x: T.cumsum(x, 1),
        "cumsum_d0": lambda T, F, x: x.cumsum(0),
        "softmax_d1": lambda T, F, x: F.softmax(x, dim=1),
        "softmax_d0": lambda T, F, x: T.softmax(x, 0),
        "log_softmax_d1": lambda T, F, x: F.log_softmax(x, dim=1),
        "log_softmax_d0": lambda T, F, x: F.log_softmax(x, dim=0),
        "count_nonzero": lambda T, F, x: T.count_nonzero(x),
    }
    for k, fn in red.items():
        add(k, f2, fn)
    add("sum_3d_d1", f3, lambda T, F, x: x.sum(1))
    add("mean_3d_d2", f3, lambda T, F, x: x.mean(-1))
    add("mean_3d_d2_keep", f3, lambda T, F, x: x.mean(-1, keepdim=True))
    add("mean_3d_dims02", f3, lambda T, F, x: x.mean((0, 2)))
    add("softmax_3d_last", f3, lambda T, F, x: F.softmax(x, -1))
    add("var_3d_last_keep", f3, lambda T, F, x: x.var(-1, keepdim=True, unbiased=False))
    add("amax_3d_last", f3, lambda T, F, x: x.amax(-1))
    # ---------------- matmul family ----------------
    add("mm", [("f", (4, 8)), ("f", (8, 4))], lambda T, F, a, b: T.mm(a, b))
    add("matmul_2d", [("f", (4, 8)), ("f", (8, 4))], lambda T, F, a, b: a @ b)
    add("matmul_3d_2d", [("f", F3), ("f", (8, 4))], lambda T, F, a, b: T.matmul(a, b))
    add("matmul_vec", [("f", (4, 8)), ("f", (8,))], lambda T, F, a, b: T.matmul(a, b))
    add("bmm", [("f", (4, 4, 8)), ("f", (4, 8, 4))], lambda T, F, a, b: T.bmm(a, b))
    add("addmm", [("f", (4,)), ("f", (4, 8)), ("f", (8, 4))], lambda T, F, c, a, b: T.addmm(c, a, b))
    add("baddbmm", [("f", (4, 4, 4)), ("f", (4, 4, 8)), ("f", (4, 8, 4))], lambda T, F, c, a, b: T.baddbmm(c, a, b))
    add("linear_nobias", [("f", (4, 8)), ("f", (4, 8))], lambda T, F, x, w: F.linear(x, w))
    add("linear_bias", [("f", (4, 8)), ("f", (4, 8)), ("f", (4,))], lambda T, F, x, w, b: F.linear(x, w, b))
    add("linear_3d", [("f", F3), ("f", (4, 8))], lambda T, F, x, w: F.linear(x, w))
    add("einsum_ij_jk", [("f", (4, 8)), ("f", (8, 4))], lambda T, F, a, b: T.einsum("ij,jk->ik", a, b))
    add("einsum_bij_bjk", [("f", (4, 4, 8)), ("f", (4, 8, 4))], lambda T, F, a, b: T.einsum("bij,bjk->bik", a, b))
    add("einsum_bsd_hd", [("f", F3), ("f", (4, 8))], lambda T, F, a, b: T.einsum("bsd,hd->bsh", a, b))
    add("dot", [("f", (8,)), ("f", (8,))], lambda T, F, a, b: T.dot(a, b))
    # ---------------- views / shape ops ----------------
    vw = {
        "view_flat": lambda T, F, x: x.view(32),
        "view_split_last": lambda T, F, x: x.view(4, 2, 4),
        "view_merge_swap": lambda T, F, x: x.reshape(8, 4),
        "view_neg1": lambda T, F, x: x.view(-1, 8),
        "reshape_flat": lambda T, F, x: x.reshape(-1),
        "flatten": lambda T, F, x: x.flatten(),
        "unflatten_1": lambda T, F, x: x.unflatten(1, (2, 4)),
        "unflatten_0": lambda T, F, x: x.unflatten(0, (2, 2)),
        "transpose": lambda T, F, x: x.transpose(0, 1),
        "t": lambda T, F, x: x.t(),
        "T_prop": lambda T, F, x: x.T,
        "permute": lambda T, F, x: x.permute(1, 0),
        "unsqueeze0": lambda T, F, x: x.unsqueeze(0),
        "unsqueeze_last": lambda T, F, x: x.unsqueeze(-1),
        "expand_new_dim": lambda T, F, x: x.unsqueeze(0).expand(2, 4, 8),
        "repeat_2_1": lambda T, F, x: x.repeat(2, 1),
        "repeat_1_2": lambda T, F, x: x.repeat(1, 2),
        "split_d0": lambda T, F, x: tuple(x.split(2, 0)),
        "split_d1": lambda T, F, x: tuple(x.split(4, 1)),
        "chunk_d1": lambda T, F, x: tuple(x.chunk(2, 1)),
        "chunk_d0": lambda T, F, x: tuple(T.chunk(x, 2, 0)),
        "unbind_d0": lambda T, F, x: tuple(x.unbind(0)),
        "narrow_d1": lambda T, F, x: x.narrow(1, 0, 4),
        "narrow_d0": lambda T, F, x: x.narrow(0, 1, 2),
        "slice_d1": lambda T, F, x: x[:, 2:6],
        "slice_d0": lambda T, F, x: x[1:3],
        "slice_step_d1": lambda T, F, x: x[:, ::2],
        "select_d0": lambda T, F, x: x[1],
        "select_d1": lambda T, F, x: x[:, 3],
        "select_fn_d1": lambda T, F, x: x.select(1, 0),
        "roll_d1": lambda T, F, x: T.roll(x, 1, 1),
        "roll_d0": lambda T, F, x: x.roll(1, 0),
        "roll_flat": lambda T, F, x: T.roll(x, 3),
        "flip_d0": lambda T, F, x: T.flip(x, [0]),
        "flip_d1": lambda T, F, x: x.flip(1),
        "tril": lambda T, F, x: T.tril(x),
        "triu_1": lambda T, F, x: x.triu(1),
        "movedim": lambda T, F, x: T.movedim(x, 0, 1),
        "squeeze_noop": lambda T, F, x: x.squeeze(),
    }
    for k, fn in vw.items():
        add(k, f2, fn)
    v3 = {
        "flatten_01": lambda T, F, x: x.flatten(0, 1),
        "flatten_12": lambda T, F, x: x.flatten(1),
        "view_3d_merge01": lambda T, F, x: x.view(16, 8),
        "view_3d_split_last": lambda T, F, x: x.view(4, 4, 2, 4),
        "permute_201": lambda T, F, x: x.permute(2, 0, 1),
        "transpose_12": lambda T, F, x: x.transpose(1, 2),
        "reshape_3d_heads": lambda T, F, x: x.reshape(4, 4, 2, 4).transpose(1, 2),
        "select_3d_d1": lambda T, F, x: x[:, 0],
        "slice_3d_last": lambda T, F, x: x[..., :4],
    }
    for k, fn in v3.items():
        add(k, f3, fn)
    add("squeeze_d1", [("f", (4, 1, 8))], lambda T, F, x: x.squeeze(1))
    add("squeeze_all", [("f", (4, 1, 8))], lambda T, F, x: x.squeeze())
    add("expand_size1", [("f", (4, 1, 8))], lambda T, F, x: x.expand(4, 4, 8))
    add("cat_d0", [("f", F2), ("f", F2)], lambda T, F, x, y: T.cat([x, y], 0))
    add("cat_d1", [("f", F2), ("f", F2)], lambda T, F, x, y: T.cat([x, y], dim=1))
    add("stack_d0", [("f", F2), ("f", F2)], lambda T, F, x, y: T.stack([x, y], 0))
    add("stack_d1", [("f", F2), ("f", F2)], lambda T, F, x, y: T.stack([x, y], 1))
    add("index_select_d1", [("f", F2), ("idx8", (3,))], lambda T, F, x, i: T.index_select(x, 1, i))
    add("index_select_d0", [("f", F2), ("idx4", (3,))], lambda T, F, x, i: x.index_select(0, i))
    add("gather_d1", [("f", F2), ("idx8", (4, 3))], lambda T, F, x, i: T.gather(x, 1, i))
    add("gather_d0", [("f", F2), ("idx4", (2, 8))], lambda T, F, x, i: x.gather(0, i))
    add("index_tensor_d0", [("f", F2), ("idx4", (3,))], lambda T, F, x, i: x[i])
    # ---------------- normalization ----------------
    add("layer_norm_noaffine", f2, lambda T, F, x: F.layer_norm(x, [8]))
    add("layer_norm_3d_noaffine", f3, lambda T, F, x: F.layer_norm(x, [8]))
    add("layer_norm_affine", [("f", F2), ("f", (8,)), ("f", (8,))], lambda T, F, x, w, b: F.layer_norm(x, [8], w, b))
    add("rms_norm_noaffine", f2, lambda T, F, x: F.rms_norm(x, [8]))
    add("rms_norm_3d_noaffine", f3, lambda T, F, x: F.rms_norm(x, [8]))
    add("rms_norm_affine", [("f", F2), ("f", (8,))], lambda T, F, x, w: F.rms_norm(x, [8], w))
    # ---------------- losses ----------------
    add("cross_entropy_mean", [("f", F2), ("idx8", (4,))], lambda T, F, x, t: F.cross_entropy(x, t))
    add("cross_entropy_sum", [("f", F2), ("idx8", (4,))], lambda T, F, x, t: F.cross_entropy(x, t, reduction="sum"))
    add("cross_entropy_none", [("f", F2), ("idx8", (4,))], lambda T, F, x, t: F.cross_entropy(x, t, reduction="none"))
    add("cross_entropy_3d", [("f", (4, 8, 4)), ("idx8", (4, 4))], lambda T, F, x, t: F.cross_entropy(x, t))
    add("nll_loss_mean", [("f", F2), ("idx8", (4,))], lambda T, F, x, t: F.nll_loss(F.log_softmax(x, 1), t))
    add("nll_loss_raw", [("f", F2), ("idx8", (4,))], lambda T, F, x, t: F.nll_loss(x, t))
    add("mse_loss_mean", [("f", F2), ("f", F2)], lambda T, F, x, y: F.mse_loss(x, y))
    add("mse_loss_sum", [("f", F2), ("f", F2)], lambda T, F, x, y: F.mse_loss(x, y, reduction="sum"))
    add("mse_loss_none", [("f", F2), ("f", F2)], lambda T, F, x, y: F.mse_loss(x, y, reduction="none"))
    # ---------------- embedding ----------------
    add("embedding", [("idx8", (4, 3)), ("f", (8, 4))], lambda T, F, i, w: F.embedding(i, w))
    # ---------------- in-place ----------------

    def ip(method, *args):
        def fn(T, F, x, *ys):
            getattr(x, method)(*(list(ys) + list(args)))
            return x

        return fn

    add("inplace_add_", [("f", F2), ("f", F2)], ip("add_"))
    add("inplace_mul_", [("f", F2), ("f", F2)], ip("mul_"))
    add("inplace_copy_", [("f", F2), ("f", F2)], ip("copy_"))
    add("inplace_add_bcast", [("f", F2), ("f", (8,))], ip("add_"))
    add("inplace_add_scalar", f2, ip("add_", 1.0))
    add("inplace_mul_scalar", f2, ip("mul_", 2.0))
    add("inplace_div_scalar", f2, ip("div_", 2.0))
    add("inplace_relu_", f2, ip("relu_"))
    add("inplace_zero_", f2, ip("zero_"))
    add("inplace_fill_", f2, ip("fill_", 2.0))
    add("inplace_clamp_", f2, lambda T, F, x: (x.clamp_(min=0.0), x)[1])
    add("inplace_neg_", f2, ip("neg_"))
    add("inplace_masked_fill_", [("f", F2), ("bool", F2)], lambda T, F, x, m: (x.masked_fill_(m, 0.0), x)[1])
    add("inplace_iadd", [("f", F2), ("f", F2)], lambda T, F, x, y: _iadd(x, y))
    # ---------------- backward (returns leaf grads) ----------------

    def bw(op, nleaf=1):
        def fn(T, F, *xs):
            xs = list(xs)
            for j in range(nleaf):
                xs[j].requires_grad_(True)
            loss = op(T, F, *xs)
            loss.backward()
            return tuple(xs[j].grad for j in range(nleaf))

        return fn

    add("bw_sum", f2, bw(lambda T, F, x: x.sum()))
    add("bw_mean", f2, bw(lambda T, F, x: x.mean()))
    add("bw_mul2_sum", f2, bw(lambda T, F, x: (x * 2).sum()))
    add("bw_relu_mean", f2, bw(lambda T, F, x: F.relu(x).mean()))
    add("bw_sum_d1_sum", f2, bw(lambda T, F, x: x.sum(1).sum()))
    add("bw_mean_d0_sum", f2, bw(lambda T, F, x: x.mean(0).sum()))
    add("bw_softmax_sq_sum", f2, bw(lambda T, F, x: (F.softmax(x, 1) ** 2).sum()))
    add("bw_layer_norm_sq_sum", f2, bw(lambda T, F, x: (F.layer_norm(x, [8]) ** 2).sum()))
    add("bw_mm_sum", [("f", (4, 8)), ("f", (8, 4))], bw(lambda T, F, a, b: (a @ b).sum(), 2))
    add("bw_mul_sum", [("f", F2), ("f", F2)], bw(lambda T, F, a, b: (a * b).sum(), 2))
    add("bw_cross_entropy", [("f", F2), ("idx8", (4,))], bw(lambda T, F, x, t: F.cross_entropy(x, t)))
    add("bw_mse", [("f", F2), ("f", F2)], bw(lambda T, F, x, y: F.mse_loss(x, y)))
    add("bw_view_sum", f3, bw(lambda T, F, x: (x.view(16, 8) ** 2).sum()))
    add("bw_embedding_sum", [("f", (8, 4)), ("idx8", (4, 3))], bw(lambda T, F, w, i: (F.embedding(i, w) ** 2).sum()))
    return C


def _iadd(x, y):
    x += y
    return x


def enumerate_runs(mesh_shape):
    """[(case_id, case_index, toks_per_input)] for this mesh."""
    out = []
    cases = build_cases()
    for ci, (name, specs, fn) in enumerate(cases):
        reduced = len(mesh_shape) > 1 and len(specs) > 1
        choices = [placement_choices(kind, len(shape), mesh_shape, reduced) for kind, shape in specs]
        if len(mesh_shape) > 1 and len(specs) >= 3:
            # 3 inputs on 2-D mesh: keep a smaller slice
            choices = [ch[:5] for ch in choices]
        for combo in itertools.product(*choices):
            cid = "%s|%s" % (name, ";".join(",".join(t) for t in combo))
            out.append((cid, ci, combo))
    return cases, out
