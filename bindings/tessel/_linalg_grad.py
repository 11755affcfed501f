"""Gradients of torch.linalg's host factorizations (tessel/linalg.py computes them with numpy's LAPACK): inv,
det, slogdet, solve, cholesky, eigh, eigvalsh and svdvals as autograd Functions with the standard real-valued
backward formulas (torch's derivatives.yaml gives the same):

    inv        Ā = -Xᵀ Ḡ Xᵀ                              (X = A⁻¹)
    det        Ā = ḡ · det(A) · A⁻ᵀ
    slogdet    Ā = ḡ_logabs · A⁻ᵀ
    solve      B̄ = A⁻ᵀ Ḡ,  Ā = -B̄ Xᵀ                    (X = A⁻¹B)
    solve_triangular   the same, Ā kept on A's triangle (its strict triangle when unitriangular)
    cholesky   Ā = sym(L⁻ᵀ Φ(Lᵀ L̄) L⁻¹)                  (Φ: lower triangle, diagonal halved)
    eigh       Ā = V (diag(w̄) + F ∘ Vᵀ V̄) Vᵀ,  F_ij = 1/(w_j - w_i), 0 on the diagonal
    eigvalsh   Ā = V diag(w̄) Vᵀ
    svdvals    Ā = U diag(s̄) Vᵀ

Each backward recomputes what it needs through the public, differentiable function on the saved input, so a
create_graph=True backward (a Hessian, a gradient penalty) differentiates again correctly; svdvals has no
differentiable SVD to recompute through and refuses create_graph. For a symmetric input the cholesky and
eigh gradients are symmetric (the derivative along symmetric perturbations, as torch gives). det, slogdet,
inv and solve need an invertible A for their gradient (torch's det also covers singular A through an SVD).
"""
from . import _C
from .autograd import Function

Tensor = _C.Tensor


def _linalg():
    from . import linalg
    return linalg


def _mT(x):
    return x.transpose(-2, -1)


def _eye_like(a):
    from ._tensor import eye
    identity = eye(a.shape[-1], dtype=a.dtype)
    return identity.expand(*a.shape) if a.dim() > 2 else identity


def _unsqueeze2(x):
    return x.unsqueeze(-1).unsqueeze(-1)


def _sym(x):
    return 0.5 * (x + _mT(x))


def _host_forward(host):
    """A Function's forward: save the matrix (and the op's options, as ctx.options), compute on the host."""
    def forward(ctx, a, *options):
        ctx.save_for_backward(a)
        ctx.options = options
        return getattr(_linalg(), host)(a, *options)
    return staticmethod(forward)


class Inv(Function):
    forward = _host_forward("_inv_host")

    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        x = _mT(_linalg().inv(a))
        return -(x @ g @ x)


class Det(Function):
    forward = _host_forward("_det_host")

    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        return _unsqueeze2(g * _linalg().det(a)) * _mT(_linalg().inv(a))


class Slogdet(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        sign, logabs = _linalg()._slogdet_host(a)
        ctx.mark_non_differentiable(sign)
        return sign, logabs

    @staticmethod
    def backward(ctx, g_sign, g_logabs):
        a, = ctx.saved_tensors
        return _unsqueeze2(g_logabs) * _mT(_linalg().inv(a))


class Solve(Function):
    @staticmethod
    def forward(ctx, a, b, left):
        ctx.save_for_backward(a, b)
        ctx.left = left
        return _linalg()._solve_host(a, b, left)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        linalg = _linalg()
        if not ctx.left:  # X A = B  <=>  Aᵀ Xᵀ = Bᵀ
            ga, gb = Solve.backward_left(linalg, _mT(a), _mT(b), _mT(g))
            return (None if ga is None else _mT(ga)), (None if gb is None else _mT(gb)), None
        ga, gb = Solve.backward_left(linalg, a, b, g)
        return ga, gb, None

    @staticmethod
    def backward_left(linalg, a, b, g):
        vector = b.dim() == a.dim() - 1  # B [..., n]: a batch of vectors
        gb = linalg.solve(_mT(a), g)
        x = linalg.solve(a, b)
        if vector:
            ga = -(gb.unsqueeze(-1) * x.unsqueeze(-2))
        else:
            ga = -(gb @ _mT(x))
        return ga, gb


class SolveTriangular(Function):
    @staticmethod
    def forward(ctx, a, b, upper, left, unitriangular):
        ctx.save_for_backward(a, b)
        ctx.options = (upper, left, unitriangular)
        from ._composed import _solve_triangular_host
        return _solve_triangular_host(a, b, upper, left, unitriangular)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        upper, left, unit = ctx.options
        if not left:  # X A = B  <=>  Aᵀ Xᵀ = Bᵀ with Aᵀ triangular the other way
            ga, gb = SolveTriangular.backward_left(_mT(a), _mT(b), _mT(g), not upper, unit)
            return _mT(ga), _mT(gb), None, None, None
        ga, gb = SolveTriangular.backward_left(a, b, g, upper, unit)
        return ga, gb, None, None, None

    @staticmethod
    def backward_left(a, b, g, upper, unit):
        solve = _linalg().solve_triangular
        gb = solve(_mT(a), g, upper=not upper, unitriangular=unit)
        x = solve(a, b, upper=upper, unitriangular=unit)
        ga = -(gb @ _mT(x))
        ga = ga.triu(1 if unit else 0) if upper else ga.tril(-1 if unit else 0)
        return ga, gb


def _phi(x):
    """The lower triangle with the diagonal halved."""
    return x.tril() - 0.5 * x.tril().triu()


class Cholesky(Function):
    forward = _host_forward("_cholesky_host")  # options: (upper,)

    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        linalg = _linalg()
        lower = linalg.cholesky(a)
        g_lower = _mT(g) if ctx.options[0] else g
        p = _phi(_mT(lower) @ g_lower)
        # S = L⁻ᵀ P L⁻¹: two triangular solves
        s = linalg.solve_triangular(_mT(lower), p, upper=True)
        s = _mT(linalg.solve_triangular(_mT(lower), _mT(s), upper=True))
        return _sym(s), None


class Eigh(Function):
    forward = _host_forward("_eigh_host")  # options: (UPLO,)

    @staticmethod
    def backward(ctx, g_w, g_v):
        a, = ctx.saved_tensors
        w, v = _linalg().eigh(a, ctx.options[0])
        gaps = w.unsqueeze(-2) - w.unsqueeze(-1)  # [i, j] = w_j - w_i
        off = 1 - _eye_like(gaps)
        f = off / (gaps + (1 - off))  # 1 / (w_j - w_i) off the diagonal, 0 on it
        inner = f * (_mT(v) @ g_v) + _unsqueeze_diag(g_w, gaps)  # f's diagonal is 0: diag(w̄) goes there
        return _sym(v @ inner @ _mT(v)), None


def _unsqueeze_diag(w, like):
    """diag(w) broadcast like a [..., n, n] matrix."""
    return w.unsqueeze(-1) * _eye_like(like)


class Eigvalsh(Function):
    forward = _host_forward("_eigvalsh_host")  # options: (UPLO,)

    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        _, v = _linalg().eigh(a, ctx.options[0])
        return _sym(v @ _unsqueeze_diag(g, a) @ _mT(v)), None


class Svdvals(Function):
    forward = _host_forward("_svdvals_host")

    @staticmethod
    def backward(ctx, g):
        if _C.is_grad_enabled():
            raise NotImplementedError("svdvals: a create_graph=True backward (second derivatives) is not supported "
                                      "(tessel's SVD has no gradient of its own)")
        a, = ctx.saved_tensors
        u, _, vh = _linalg().svd(a.detach(), full_matrices=False)
        return u @ _unsqueeze_diag(g, _eye_like_k(g)) @ vh


def _eye_like_k(s):
    """An identity [..., k, k] for singular values s [..., k]."""
    from ._tensor import eye
    identity = eye(s.shape[-1], dtype=s.dtype)
    return identity.expand(*(list(s.shape) + [s.shape[-1]])) if s.dim() > 1 else identity
