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
    svd        Ā = U [sk(Uᵀ Ū)/E · S + S · sk(Vᵀ V̄)/E + diag(s̄)] Vᵀ + (I − U Uᵀ) Ū S⁻¹ Vᵀ + U S⁻¹ V̄ᵀ (I − V Vᵀ)
               (sk(X) = X − Xᵀ, E_ij = s_j² − s_i²; torch's svd_backward, real case)
    qr         m ≥ n: Ā = (Q̄ + Q copyltu(M)) R⁻ᵀ,  M = R R̄ᵀ − Q̄ᵀ Q  (copyltu: the lower triangle mirrored up);
               m < n: A = [X | Y], Ȳ = Q R̄_Y, X̄ = the square case with Q̄ + Y R̄_Yᵀ and R̄_X
    pinv       Ā = −A⁺ᵀ Ḡ A⁺ᵀ + (I − A A⁺) Ḡᵀ A⁺ A⁺ᵀ + A⁺ᵀ A⁺ Ḡᵀ (I − A⁺ A)   (constant rank)
    lstsq      the solution as pinv(A) B (its value from LAPACK's least squares)
    cholesky_solve   X = (L Lᵀ)⁻¹ B: B̄ = (L Lᵀ)⁻¹ Ḡ,  L̄ = −(B̄ Xᵀ + X B̄ᵀ) L  (Uᵀ U: Ū = −U (B̄ Xᵀ + X B̄ᵀ)),
               over all of L as torch's (its entries off the triangle, unused by the value, get gradients too)
    lu_factor  A = P L U square: Ā = P L⁻ᵀ Φ U⁻ᵀ,  Φ = tril(Lᵀ L̄, −1) + triu(Ū Uᵀ)  (L̄, Ū: the packed gradient's
               strict lower and upper triangles); m > n: L = [L₁; L₂], the square case on L₁ with Φ's upper
               part triu(Ū Uᵀ − L₂ᵀ L̄₂) and Ā₂ = P (L̄₂ U⁻ᵀ); m < n: U = [U₁ U₂], the square case on U₁ with
               Φ's lower part tril(Lᵀ L̄ − Ū₂ U₂ᵀ, −1) and Ā₂ = P L⁻ᵀ Ū₂ (torch's linalg_lu_backward)

Each backward recomputes what it needs through the public, differentiable function on the saved input, so a
create_graph=True backward (a Hessian, a gradient penalty) differentiates again correctly (svdvals, svd, qr, pinv
and lu_factor recompute through their own Functions, so they differentiate twice). For a symmetric input the
cholesky and eigh gradients are symmetric (the derivative along symmetric perturbations, as torch gives). det, slogdet,
inv and solve need an invertible A for their gradient; det and slogdet cover a singular A through the SVD's
adjugate (torch's give no error there either).
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


def _adjugate_t(a):
    """adj(A)ᵀ (the cofactor matrix, det's derivative) through an SVD on the host, for singular A too: with
    A = U S Vᴴ, adj(A)ᵀ = det(U) det(Vᴴ) U diag(Π_{j≠i} s_j) Vᴴ. First-order only (no graph)."""
    import numpy as np
    x = _linalg()._host(a, "det")
    u, s, vh = np.linalg.svd(x)
    n = s.shape[-1]
    others = np.stack([np.prod(np.delete(s, i, axis=-1), axis=-1) for i in range(n)], axis=-1) if n > 1 else \
        np.ones_like(s)
    sign = np.linalg.det(u) * np.linalg.det(vh)
    return _linalg()._back(sign[..., None, None] * (u * others[..., None, :]) @ vh, a)


def _singular(a, det):
    return not _C.is_grad_enabled() and bool((det == 0).any())  # (a create_graph backward keeps the inverse)


class Det(Function):
    forward = _host_forward("_det_host")

    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        det = _linalg().det(a)
        if _singular(a, det):  # torch covers singular A too (the inverse raised LinAlgError)
            return _unsqueeze2(g) * _adjugate_t(a)
        return _unsqueeze2(g * det) * _mT(_linalg().inv(a))


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
        det = _linalg().det(a)
        if _singular(a, det):  # adj(A)ᵀ / det: infinite where the cofactors are not 0, as torch's (not an error)
            return _unsqueeze2(g_logabs) * _adjugate_t(a) / _unsqueeze2(det)
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
        vector = linalg.vector_rhs(a.shape, b.shape)  # B [..., n]: a batch of vectors
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
        lower = _mT(linalg.cholesky(a, upper=True)) if ctx.options[0] else linalg.cholesky(a)  # A's own triangle
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
        inner = _unsqueeze_diag(g_w, gaps)
        if g_v is not None and bool((g_v != 0).any()):  # torch's: without an eigenvector gradient, no 1 / gap term
            off = 1 - _eye_like(gaps)  # (repeated eigenvalues would make it 0 · inf)
            f = off / (gaps + (1 - off))  # 1 / (w_j - w_i) off the diagonal, 0 on it
            inner = inner + f * (_mT(v) @ g_v)  # f's diagonal is 0: diag(w̄) goes there
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
        a, = ctx.saved_tensors  # (a create_graph backward differentiates U and Vᴴ through Svd's own Function)
        u, _, vh = _linalg().svd(a, full_matrices=False)
        return u @ _unsqueeze_diag(g, _eye_like_k(g)) @ vh


def _eye_like_k(s):
    """An identity [..., k, k] for singular values s [..., k]."""
    from ._tensor import eye
    identity = eye(s.shape[-1], dtype=s.dtype)
    return identity.expand(*(list(s.shape) + [s.shape[-1]])) if s.dim() > 1 else identity


def _scale_cols(x, s):
    return x * s.unsqueeze(-2)


def _scale_rows(x, s):
    return x * s.unsqueeze(-1)


class Svd(Function):
    forward = _host_forward("_svd_host")  # options: (full_matrices,)

    @staticmethod
    def backward(ctx, g_u, g_s, g_vh):
        a, = ctx.saved_tensors
        m, n = a.shape[-2], a.shape[-1]
        # an all-zero gradient (what autograd passes for an output the loss did not use) contributes nothing
        g_u = None if g_u is None or not bool((g_u != 0).any()) else g_u
        g_vh = None if g_vh is None or not bool((g_vh != 0).any()) else g_vh
        # full_matrices: the extra columns of U and rows of Vh (any orthonormal completion: not functions of A) are
        # dropped with their gradients, as torch's svd_backward narrows gU and gVh to the first k
        u, s, vh = _linalg().svd(a, full_matrices=False)
        v = _mT(vh)
        k = s.shape[-1]
        g_s = s * 0 if g_s is None else g_s
        if g_u is None and g_vh is None:
            return u @ _unsqueeze_diag(g_s, _eye_like_k(s)) @ vh, None
        s2 = s * s
        e = s2.unsqueeze(-2) - s2.unsqueeze(-1)  # [i, j] = s_j² − s_i²
        eye = _eye_like_k(s)
        e = e + eye  # 1 on the diagonal, where the skew parts are 0
        inner = _unsqueeze_diag(g_s, eye)
        term = 0
        if g_u is not None:
            g_u = g_u[..., :k]
            uhgu = _mT(u) @ g_u
            inner = inner + _scale_cols((uhgu - _mT(uhgu)) / e, s)
            if m > k:  # (I − U Uᵀ) Ū S⁻¹ Vᵀ
                term = term + _scale_cols(g_u - u @ uhgu, 1.0 / s) @ vh
        if g_vh is not None:
            g_v = _mT(g_vh[..., :k, :])
            vhgv = vh @ g_v
            inner = inner + _scale_rows((vhgv - _mT(vhgv)) / e, s)
            if n > k:  # U S⁻¹ V̄ᵀ (I − V Vᵀ)
                term = term + _scale_cols(u, 1.0 / s) @ _mT(g_v - v @ vhgv)
        return u @ inner @ vh + term, None


class CholeskySolve(Function):
    @staticmethod
    def forward(ctx, b, factor, upper):
        from ._namespace import _cholesky_solve
        ctx.save_for_backward(b, factor)
        ctx.upper = upper
        return _cholesky_solve(b, factor, upper)

    @staticmethod
    def backward(ctx, g):
        from ._namespace import cholesky_solve
        from ._pow import _sum_to
        b, factor = ctx.saved_tensors
        g_b = cholesky_solve(g, factor, ctx.upper)
        x = cholesky_solve(b, factor, ctx.upper)
        common = g_b @ _mT(x)
        common = common + _mT(common)
        g_factor = -(factor @ common) if ctx.upper else -(common @ factor)
        return _sum_to(g_b, b.shape), _sum_to(g_factor, factor.shape), None


class LuFactor(Function):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        from ._linalg_lu import _lu_factor_host
        lu, pivots, info = _lu_factor_host(a)
        ctx.mark_non_differentiable(pivots, info)
        return lu, pivots, info

    @staticmethod
    def backward(ctx, g_lu, g_pivots, g_info):
        a, = ctx.saved_tensors
        p, lower, upper = _linalg().lu(a)  # differentiable again: a create_graph backward recomputes through it
        m, n = a.shape[-2], a.shape[-1]
        k = min(m, n)
        solve = _linalg().solve_triangular
        g_l, g_u = g_lu[..., :, :k].tril(-1), g_lu[..., :k, :].triu()
        l1, u1 = lower[..., :k, :], upper[..., :, :k]
        phi_l = _mT(l1) @ g_l[..., :k, :]
        phi_u = g_u[..., :, :k] @ _mT(u1)
        if m > n:
            phi_u = phi_u - _mT(lower[..., k:, :]) @ g_l[..., k:, :]
        elif m < n:
            phi_l = phi_l - g_u[..., :, k:] @ _mT(upper[..., :, k:])
        phi = phi_l.tril(-1) + phi_u.triu()
        x = solve(_mT(l1), phi, upper=True, unitriangular=True)  # L₁⁻ᵀ Φ
        g_a = solve(_mT(u1), x, upper=False, left=False)  # ... U₁⁻ᵀ
        if m > n:
            g_a = _C._functional.cat([g_a, solve(_mT(u1), g_l[..., k:, :], upper=False, left=False)], -2)
        elif m < n:
            g_a = _C._functional.cat([g_a, solve(_mT(l1), g_u[..., :, k:], upper=True, unitriangular=True)], -1)
        return p @ g_a


def _copyltu(m):
    return m.tril() + _mT(m.tril(-1))


def _qr_backward_tall(q, r, g_q, g_r):
    """m ≥ n: Ā = (Q̄ + Q copyltu(M)) R⁻ᵀ with M = R R̄ᵀ − Q̄ᵀ Q."""
    m = r @ _mT(g_r) - _mT(g_q) @ q
    b = g_q + q @ _copyltu(m)
    return _linalg().solve_triangular(_mT(r), b, upper=False, left=False)


class Qr(Function):
    forward = _host_forward("_qr_host")  # options: (mode,)

    @staticmethod
    def backward(ctx, g_q, g_r):
        a, = ctx.saved_tensors
        mode = ctx.options[0]
        rows, cols = a.shape[-2], a.shape[-1]
        if mode == "r":
            raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
                               "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through "
                               "linalg.qr.")
        if mode == "complete" and rows > cols:
            raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
        q, r = _linalg().qr(a, mode="reduced")
        g_q = q * 0 if g_q is None else g_q
        g_r = r * 0 if g_r is None else g_r
        if rows >= cols:
            return _qr_backward_tall(q, r, g_q, g_r), None
        y = a[..., rows:]
        g_rx, g_ry = g_r[..., :rows], g_r[..., rows:]
        g_x = _qr_backward_tall(q, r[..., :rows], g_q + y @ _mT(g_ry), g_rx)
        return _C._functional.cat([g_x, q @ g_ry], -1), None


class Pinv(Function):
    forward = _host_forward("_pinv_host")  # options: (hermitian, atol, rtol)

    @staticmethod
    def backward(ctx, g):
        a, = ctx.saved_tensors
        p = _linalg().pinv(a, hermitian=ctx.options[0], atol=ctx.options[1], rtol=ctx.options[2])
        pt = _mT(p)
        gt = _mT(g)
        out = -(pt @ g @ pt)
        out = out + (gt - a @ (p @ gt)) @ (p @ pt)  # (I − A A⁺) Ḡᵀ A⁺ A⁺ᵀ
        out = out + (pt @ p) @ (gt - (gt @ p) @ a)  # A⁺ᵀ A⁺ Ḡᵀ (I − A⁺ A)
        return (out,) + (None,) * len(ctx.options)
