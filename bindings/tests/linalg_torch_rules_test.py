"""torch.linalg, torch.fft and torch.special against torch 2.15, from the fortieth session's read-only sweep of the
three namespaces: torch's input checks and failure messages (torch._C._LinAlgError naming the batch element and LAPACK's
pivot or minor), batched lstsq with its driver's outputs, norms of half-precision and complex tensors, fft's dims and
infinities, the special functions' edges and gradients, and the functions that were missing (eig's gradient,
torch.lu, torch.ormqr, the Bessel functions of the second kind and airy_ai). Each expected value below is what
torch 2.15 computed for the same call (pasted from its output), never tessel's own.
"""
import math

import numpy as np
import pytest

import tessel

L = tessel.linalg
F = tessel.fft
S = tessel.special
D = tessel.float64
INF, NAN = math.inf, math.nan


def f64(values, requires_grad=False):
    return tessel.tensor(values, dtype=D, requires_grad=requires_grad)


def close(got, want, rtol=1e-12, atol=0.0):
    got = got.tolist() if hasattr(got, "tolist") else got
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), rtol=rtol,
                               atol=atol, equal_nan=True)


def grad_of(fn, values, dtype=D):
    x = tessel.tensor(values, dtype=dtype, requires_grad=True)
    fn(x).sum().backward()
    return x.grad.tolist()


def raises(kind, fragment, fn, *args, **kwargs):
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    assert fragment in str(info.value), str(info.value)
    return info.value


def parts(z):
    return [[v.real, v.imag] for v in z.numpy().reshape(-1).tolist()]


# ---- decompositions and solvers ------------------------------------------------------------------------------

def test_svd_gradient_with_full_matrices_ignores_the_extra_singular_vectors():
    w = f64([[4.0, 1.0], [1.0, 3.0], [0.0, 1.0]], requires_grad=True)
    u, s, vh = L.svd(w)  # full_matrices=True on a 3 x 2 matrix: it raised NotImplementedError
    (u[:, :1] @ tessel.diag(s[:1]) @ vh[:1]).sum().backward()
    close(w.grad, [[0.30756815874006094, 1.407825509943945], [1.2244492847432973, 1.5776183110556556],
                   [1.2584078449656395, 1.00032278727584]], rtol=1e-12)  # torch's
    w.grad = None
    u, s, v = tessel.svd(w, some=False)
    ((u[:, 0] * f64([1.0, 2.0, 3.0])).sum() + (v[:, 1] ** 3).sum()).backward()
    close(w.grad, [[-0.017574605475908042, 0.24071107188486188], [-0.12775218952090228, 0.07702538258647754],
                   [-0.4692808291519916, -0.27373660821975776]], rtol=1e-12)  # torch's
    shapes = [list(t.shape) for t in tessel.svd(tessel.ones(3, 2), compute_uv=False)]
    assert shapes == [[3, 3], [2], [2, 2]]  # torch's zero-filled U [m, m] and V [n, n] (they were [3, 2], [2, 2])


def test_lstsq_is_batched_broadcasts_and_fills_its_drivers_outputs():
    a = f64([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]])
    b = f64([[1.0], [0.0], [2.0]])
    r = L.lstsq(tessel.stack([a, 2 * a]), tessel.stack([b, b]), driver="gelsd")  # numpy's lstsq was 2-D only
    close(r.solution, [[[-1.7857142857142858], [1.4999999999999996]], [[-0.8928571428571429], [0.7499999999999998]]],
          rtol=1e-12)  # torch's
    close(r.residuals, [[0.6428571428571417], [0.6428571428571417]], rtol=1e-12)
    assert r.rank.tolist() == [2, 2] and r.rank.dtype == tessel.int64
    close(r.singular_values, [[10.191428257097222, 0.36713768594389923], [20.382856514194444, 0.7342753718877985]])
    # the default driver gelsy gives no residuals and no singular values; gels no rank (torch's shapes)
    assert [list(t.shape) for t in L.lstsq(a, b)] == [[2, 1], [0], [], [0]]
    r = L.lstsq(a, b, driver="gels")
    assert [list(t.shape) for t in r] == [[2, 1], [1], [0], [0]]
    close(r.residuals, [0.6428571428571417])
    # B with one dim fewer than A: a batch of vectors
    close(L.lstsq(tessel.stack([a, 2 * a]), tessel.stack([b[:, 0], b[:, 0]])).solution,
          [[-1.7857142857142851, 1.4999999999999996], [-0.8928571428571426, 0.7499999999999998]], rtol=1e-12)
    raises(RuntimeError, "parameter `driver` should be one of (gels, gelsy, gelsd, gelss)", L.lstsq, a, b,
           driver="foo")
    raises(RuntimeError, "The size of tensor a (2) must match the size of tensor b (3) at non-singleton dimension 0",
           L.lstsq, tessel.ones(2, 3, 2), tessel.ones(3, 1))  # B [3, 1] is three vectors here
    raises(RuntimeError, "torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's dtype "
           "Float and other's dtype Double", L.lstsq, tessel.ones(3, 2), tessel.ones(3, 1, dtype=D))
    raises(RuntimeError, "torch.linalg.lstsq: input.size(-2) should match other.size(-1)", L.lstsq,
           tessel.ones(3, 2), tessel.ones(2))


def test_linalg_error_is_torch_C_LinAlgError_naming_the_batch_element_and_pivot():
    assert tessel._C._LinAlgError is L.LinAlgError and L.LinAlgError.__name__ == "_LinAlgError"
    batch = tessel.stack([tessel.eye(2), tessel.tensor([[1.0, 2.0], [2.0, 4.0]])])
    e = raises(L.LinAlgError, "", L.inv, batch)
    assert isinstance(e, RuntimeError)
    assert str(e) == ("linalg.inv: (Batch element 1): The diagonal element 2 is zero, the inversion could not be "
                      "completed because the input matrix is singular.")  # torch's (it was "Singular matrix")
    raises(L.LinAlgError, "linalg.cholesky: The factorization could not be completed because the input is not "
           "positive-definite (the leading minor of order 2 is not positive-definite).", L.cholesky,
           tessel.tensor([[1.0, 2.0], [2.0, 1.0]]))
    raises(L.LinAlgError, "linalg.cholesky: (Batch element 2): The factorization could not be completed because the "
           "input is not positive-definite (the leading minor of order 1", L.cholesky,
           tessel.stack([tessel.eye(2), -tessel.eye(2)]).reshape(2, 1, 2, 2).expand(2, 2, 2, 2))
    raises(L.LinAlgError, "torch.linalg.solve: (Batch element 1): The solver failed because the input matrix is "
           "singular.", L.solve, tessel.stack([tessel.eye(2), tessel.zeros(2, 2)]), tessel.ones(2, 2, 1))
    raises(L.LinAlgError, "linalg.inv: The diagonal element 1 is zero", L.matrix_power, tessel.zeros(2, 2), -1)
    raises(L.LinAlgError, "linalg.svd: (Batch element 1): The algorithm failed to converge because the input matrix "
           "contained non-finite values.", L.svd,
           tessel.stack([tessel.eye(2), tessel.tensor([[NAN, 1.0], [1.0, 2.0]])]))
    # a NaN pivot fails as LAPACK's potrf does (numpy's cholesky returned NaNs)
    raises(L.LinAlgError, "the leading minor of order 1 is not positive-definite", L.cholesky,
           tessel.tensor([[NAN, 1.0], [1.0, 3.0]]))
    raises(L.LinAlgError, "the leading minor of order 2 is not positive-definite", L.cholesky,
           tessel.tensor([[1.0, 1.0], [NAN, 2.0]]))
    assert L.cholesky_ex(tessel.tensor([[NAN, 1.0], [1.0, 2.0]])).info.tolist() == 1  # torch's info


def test_ex_functions_raise_linalg_error_named_for_themselves_under_check_errors():
    raises(L.LinAlgError, "linalg.inv_ex: (Batch element 0): The diagonal element 1 is zero", L.inv_ex,
           tessel.zeros(3, 2, 2), check_errors=True)  # (a plain RuntimeError named linalg.inv)
    raises(L.LinAlgError, "linalg.cholesky_ex: (Batch element 1): The factorization could not be completed because "
           "the input is not positive-definite (the leading minor of order 1 is not positive-definite).",
           L.cholesky_ex, tessel.stack([tessel.eye(2), -tessel.eye(2)]), check_errors=True)
    raises(L.LinAlgError, "torch.linalg.solve_ex: (Batch element 1): The solver failed", L.solve_ex,
           tessel.stack([tessel.eye(2), tessel.zeros(2, 2)]), tessel.ones(2, 2, 1), check_errors=True)
    raises(RuntimeError, "torch.linalg.lu_factor: (Batch element 0): U[1,1] is zero and using it on lu_solve would "
           "result in a division by zero. If you still want", L.lu_factor, tessel.zeros(2, 2, 2))
    raises(RuntimeError, "torch.linalg.lu_factor_ex: U[1,1] is zero and using it on lu_solve would result in a "
           "division by zero. If you still want to perform the factorization", L.lu_factor_ex, tessel.zeros(2, 2),
           check_errors=True)


def test_pinv_takes_rcond_by_keyword_or_position():
    a = tessel.diag(tessel.tensor([1.0, 1e-3, 1.0]))
    want = [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]  # torch's: 1e-3 below rcond · σ_max is dropped
    close(L.pinv(a, rcond=1e-2), want)
    close(L.pinv(a, 1e-2), want)
    close(L.pinv(a, 1e-2, True), want)  # (rcond, hermitian) positional


def test_eig_and_eigvals_are_differentiable_for_real_input():
    a = f64([[2.0, 1.0, 0.0], [0.5, 3.0, 1.0], [0.0, 1.0, 4.0]], requires_grad=True)
    w = L.eigvals(a)  # (they raised NotImplementedError for an input that requires grad)
    (w.real * f64([1.0, 2.0, 3.0])).sum().backward()
    close(a.grad, [[1.3605855635994026, 0.36737118077905423, -0.04085482506750465],
                   [0.7347423615581077, 2.013618275022502, 0.5713230612880893],
                   [-0.08170965013500929, 0.571323061288089, 2.625796161378095]], rtol=1e-10)  # torch's
    a.grad = None
    _, v = L.eig(a)
    (v.abs() ** 2 * f64([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0], [2.0, 0.0, 1.0]])).sum().backward()
    close(a.grad, [[0.36807715504112115, 0.5947915208565339, -0.09984778910690681],
                   [-1.0545606979824784, -0.5334822942807913, 0.16145562816634443],
                   [-0.1010089051675856, -0.026294784230186722, 0.16540513923967018]], rtol=1e-10)
    b = f64([[0.0, -2.0], [1.0, 0.5]], requires_grad=True)  # a complex pair of eigenvalues
    w = L.eigvals(b)
    (w.imag.abs() + w.real * 2).sum().backward()
    close(b.grad, [[2.1796053020267747, -0.7184212081070998], [1.436842416214199, 1.820394697973225]], rtol=1e-10)
    _, v = L.eig(b)
    raises(RuntimeError, "linalg_eig_backward: The eigenvectors in the complex case are specified up to "
           "multiplication by e^{i phi}.", v.real.sum().backward)


def test_torch_lu_and_ormqr():
    with pytest.warns(UserWarning, match="torch.lu is deprecated"):
        lu, pivots = tessel.lu(tessel.tensor([[1.0, 2.0], [3.0, 4.0]]))
    close(lu, [[3.0, 4.0], [0.3333333432674408, 0.6666666269302368]], rtol=1e-6)  # torch's
    assert pivots.tolist() == [2, 2] and pivots.dtype == tessel.int32
    r = tessel.lu(tessel.zeros(2, 2, 2), get_infos=True)  # a singular matrix is no error here
    assert type(r).__name__ == "_lu_with_info" and r[2].tolist() == [1, 1]
    h, tau = tessel.geqrf(tessel.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]]))
    c, right = tessel.tensor([[1.0, 0.0], [2.0, 1.0], [0.0, 3.0]]), tessel.tensor([[1.0, 0.0, 2.0], [2.0, 1.0, 0.0]])
    close(tessel.ormqr(h, tau, c), [[1.728335976600647, 0.1469002217054367], [-1.13954758644104, -2.721579074859619],
                                    [-0.8451542854309082, 1.603567361831665]], rtol=1e-5)  # torch's (float32)
    close(tessel.ormqr(h, tau, c, transpose=True),
          [[-1.1832159757614136, -3.042555809020996], [0.31622835993766785, -0.31622743606567383],
           [-1.8708287477493286, 0.8017834424972534]], rtol=1e-5, atol=1e-6)
    close(tessel.ormqr(h, tau, right, left=False),
          [[-1.8593395948410034, 0.9486833810806274, 0.8017838001251221],
           [-0.8451545238494873, 1.581139326095581, -1.336306095123291]], rtol=1e-5)
    close(tessel.ormqr(h, tau, right, left=False, transpose=True),
          [[-0.7035531401634216, -2.1106603145599365, 0.223890483379364],
           [0.6106216311454773, -1.3304126262664795, -1.690308690071106]], rtol=1e-5)


def test_matrix_exp_of_an_infinite_matrix_is_nan():
    close(L.matrix_exp(tessel.tensor([[[INF, 0.0], [0.0, 3.0]], [[0.0, 1.0], [0.0, 0.0]]])),
          [[[NAN, NAN], [NAN, NAN]], [[1.0, 1.0], [0.0, 1.0]]])  # torch's (it raised OverflowError)


def test_vander_power_zero_is_one_at_inf_and_nan():
    close(L.vander(tessel.tensor([INF, 2.0, NAN])), [[1.0, INF, INF], [1.0, 2.0, 4.0], [1.0, NAN, NAN]])  # torch's
    close(tessel.vander(tessel.tensor([INF, 2.0]), N=3), [[INF, INF, 1.0], [4.0, 2.0, 1.0]])
    raises(RuntimeError, "N must be greater than 1.", L.vander, tessel.tensor([1.0, 2.0]), N=1)
    raises(RuntimeError, "x must be a one-dimensional tensor.", tessel.vander, tessel.ones(2, 2))
    raises(RuntimeError, "N must be non-negative.", tessel.vander, tessel.ones(2), N=-1)
    assert list(tessel.vander(tessel.ones(2), N=0).shape) == [2, 0]


# ---- norms ----------------------------------------------------------------------------------------------------

def test_half_precision_norms_accumulate_in_float32():
    half = tessel.float16
    assert L.vector_norm(tessel.tensor([300.0, 400.0], dtype=half)).item() == 500.0  # torch's (it was inf)
    assert L.norm(tessel.full((4, 4), 100.0, dtype=half)).item() == 400.0
    assert L.matrix_norm(tessel.full((4, 4), 100.0, dtype=half)).item() == 400.0
    assert L.vector_norm(tessel.tensor([30.0, 40.0], dtype=half), 3).item() == 44.96875
    assert L.vector_norm(tessel.tensor([300.0, 400.0], dtype=half)).dtype == half


def test_norms_of_complex_tensors_are_norms_of_the_moduli():
    c = F.rfft(tessel.tensor([1.0, 2.0, 3.0, 4.0]))
    got = [L.norm(c).item(), L.vector_norm(c, INF).item(), L.vector_norm(c, 1).item(), L.vector_norm(c, 3).item(),
           c.norm().item()]
    close(got, [10.58300495147705, 10.0, 14.8284273147583, 10.101067543029785, 10.58300495147705], rtol=1e-6)
    x = f64([1.0, -2.0, 0.5, 3.0], requires_grad=True)
    (F.rfft(x).norm() + L.vector_norm(F.fft(x), 3)).backward()
    close(x.grad, [0.8973701301358181, -1.5929479232926522, 0.47903137597240864, 2.590439618341442], rtol=1e-12)
    x.grad = None
    F.rfft(x).angle().sum().backward()  # angle() of a complex tensor that requires grad raised
    close(x.grad, [-0.19801980198019803, -0.019801980198019802, 0.19801980198019803, 0.019801980198019802])


def test_norm_dims_are_checked_as_torch():
    x = tessel.ones(2, 3)
    raises(IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)", L.vector_norm, x,
           dim=2)  # (it wrapped to dim 0)
    raises(IndexError, "but got -3", L.norm, x, dim=-3)
    raises(IndexError, "but got 5", L.norm, x, dim=5)
    raises(RuntimeError, "dim 0 appears multiple times in the list of dims", L.vector_norm, x, dim=(0, -2))
    raises(RuntimeError, "linalg.matrix_norm: dims must be different. Got (1, 1)", L.matrix_norm, x, dim=(1, -1))
    raises(RuntimeError, "linalg.matrix_norm: dim must be a 2-tuple. Got 1", L.norm, x, "fro", dim=1)
    raises(RuntimeError, "linalg.matrix_norm: The input tensor A must have at least 2 dimensions.", L.matrix_norm,
           tessel.ones(3))
    raises(RuntimeError, "linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got 3D.",
           L.norm, tessel.ones(2, 3, 4), "fro")  # (it gave per-batch values)
    raises(RuntimeError, "linalg.norm: If dim is specified, it must be of length 1 or 2. Got [0, 1, 2]", L.norm,
           tessel.ones(2, 3, 4), dim=(0, 1, 2))
    raises(RuntimeError, "linalg.vector_norm cannot compute the inf norm on an empty tensor", L.vector_norm,
           tessel.ones(0), INF)
    raises(TypeError, "argument 'ord' (position 2) must be Number, not str", L.vector_norm, tessel.ones(3), "fro")


# ---- dtypes and shapes torch refuses -------------------------------------------------------------------------

def test_integer_and_mixed_dtype_inputs_are_refused():
    i = tessel.tensor([[1, 2], [3, 4]])
    for fn, name in ((L.det, "linalg.det"), (L.inv, "linalg.inv"), (L.slogdet, "linalg.slogdet"),
                     (tessel.logdet, "logdet"), (L.vector_norm, "linalg.vector_norm"), (L.norm, "linalg.vector_norm"),
                     (L.matrix_exp, "linalg.matrix_exp"), (L.cholesky, "linalg.cholesky"), (L.svd, "linalg.svd")):
        raises(NotImplementedError, "%s: Expected a floating point or complex tensor as input. Got Long" % name, fn, i)
    raises(NotImplementedError, "linalg.solve: Expected a floating point or complex tensor as input. Got Long",
           L.solve, i, i)
    raises(NotImplementedError, "linalg.inv: Expected a floating point or complex tensor as input. Got Long",
           L.matrix_power, i, -1)
    raises(NotImplementedError, "linalg.vecdot: Expected a floating point or complex tensor as input. Got Long",
           L.vecdot, tessel.tensor([1, 2]), tessel.tensor([3, 4]))
    raises(NotImplementedError, "\"lu_cpu\" not implemented for 'Long'", L.lu_factor, i)
    raises(RuntimeError, "linalg.solve: Expected A and B to have the same dtype, but found A of type Float and B of "
           "type Double instead", L.solve, tessel.eye(2), tessel.ones(2, dtype=D))
    raises(RuntimeError, "linalg.vecdot: Expected x and y to have the same dtype, but found x of type Float and y of "
           "type Double instead", L.vecdot, tessel.ones(2), tessel.ones(2, dtype=D))
    raises(RuntimeError, "expected scalar type Long but found Float", L.cross, tessel.tensor([1, 2, 3]),
           tessel.tensor([1.0, 2.0, 3.0]))
    raises(RuntimeError, "linalg.vector_norm: the dtype of the input (Double) should be convertible without narrowing "
           "to the specified dtype (Float)", L.vector_norm, tessel.ones(2, dtype=D), dtype=tessel.float32)
    raises(RuntimeError, "multi_dot(): the last tensor must be 1D or 2D but got 3D", L.multi_dot,
           [tessel.ones(2, 3), tessel.ones(2, 3, 3)])
    raises(RuntimeError, "multi_dot(): tensors 0 and 1 with shapes [2, 3] and [2, 3] cannot be multiplied",
           L.multi_dot, [tessel.ones(2, 3), tessel.ones(2, 3)])
    raises(RuntimeError, "linalg.cross: inputs must have the same number of dimensions.", L.cross,
           tessel.ones(2, 3), tessel.ones(3))
    raises(RuntimeError, "linalg.cond(ord=1): A must be batches of square matrices, but they are 3 by 2 matrices",
           L.cond, tessel.ones(3, 2), 1)


def test_non_square_and_one_dimensional_inputs_get_torchs_errors():
    wide = tessel.ones(2, 3)
    for fn, name in ((L.det, "linalg.det"), (L.inv, "linalg.inv"), (L.cholesky, "linalg.cholesky"),
                     (L.eigh, "linalg.eigh"), (L.eig, "linalg.eig"), (L.inv_ex, "linalg.inv"),
                     (L.matrix_power, "linalg.matrix_power")):
        args = (wide, 2) if fn is L.matrix_power else (wide,)
        raises(RuntimeError, "%s: A must be batches of square matrices, but they are 2 by 3 matrices" % name, fn,
               *args)
    for fn, name in ((L.svd, "linalg.svd"), (L.qr, "linalg.qr"), (L.det, "linalg.det"),
                     (L.matrix_exp, "linalg.matrix_exp")):
        raises(RuntimeError, "%s: The input tensor A must have at least 2 dimensions." % name, fn, tessel.ones(3))
    raises(RuntimeError, "linalg.solve: Incompatible shapes of A and B for the equation AX = B (3x3 and 2x1)",
           L.solve, tessel.eye(3), tessel.ones(2, 1))
    raises(RuntimeError, "linalg.solve: Incompatible shapes of A and B for the equation XA = B (3x3 and 2x2)",
           L.solve, tessel.eye(3), tessel.ones(2, 2), left=False)
    raises(RuntimeError, "linalg.solve_triangular: The input tensor B must have at least 2 dimensions.",
           L.solve_triangular, tessel.eye(2), tessel.ones(2), upper=True)
    raises(RuntimeError, "linalg.solve_triangular: A must be batches of square matrices, but they are 2 by 3",
           L.solve_triangular, wide, tessel.ones(2, 1), upper=True)
    raises(RuntimeError, "qr received unrecognized mode 'full'", L.qr, tessel.eye(2), mode="full")
    raises(RuntimeError, "Expected UPLO argument to be 'L' or 'U', but got X", L.eigh, tessel.eye(2), UPLO="X")
    raises(RuntimeError, "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs",
           L.svd, tessel.eye(2), driver="gesvd")
    raises(RuntimeError, "torch.linalg.eig: input tensor should not contain infs or NaNs.", L.eig,
           tessel.tensor([[NAN, 1.0], [1.0, 2.0]]))


# ---- fft ------------------------------------------------------------------------------------------------------

def test_fft_dims_are_checked_as_torch():
    x = tessel.ones(2, 3)
    raises(IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)", F.fft, x, dim=2)
    raises(IndexError, "Dimension out of range (expected to be in range of [-1, 0], but got -2)", F.fft2,
           tessel.tensor([1.0, 2.0, 3.0]))  # (it transformed the one dim twice)
    raises(RuntimeError, "FFT dims must be unique", F.fftn, x, dim=(0, 0))
    raises(RuntimeError, "FFT dims must be unique", F.rfftn, x, dim=(1, -1))
    raises(IndexError, "Dimension specified as -1 but tensor has no dimensions", F.fft, tessel.tensor(1.0))
    raises(TypeError, "fft_fft(): argument 'dim' must be int, not tuple", F.fft, x, dim=(0, 1))
    raises(RuntimeError, "Got shape with 3 values but input tensor only has 2 dimensions.", F.fftn, x, s=(2, 2, 2))
    raises(RuntimeError, "rfftn must transform at least one axis", F.rfftn, x, dim=())
    # s = -1: that dim's own length (torch's), not an error
    assert list(F.fftn(tessel.ones(3, 4), s=(-1, 6)).shape) == [3, 6]


def test_fft_errors_and_dtypes():
    x = tessel.tensor([1.0, 2.0, -1.0, 0.5])
    c = F.fft(x)
    raises(RuntimeError, 'Invalid normalization mode: "foo"', F.fft, x, norm="foo")  # (ValueError)
    raises(RuntimeError, 'Invalid normalization mode: "foo"', F.ihfft, x, norm="foo")  # (KeyError)
    raises(RuntimeError, "Invalid number of data points (0) specified", F.fft, tessel.zeros(0))
    raises(TypeError, "rfft expects a real input tensor, but got ComplexFloat", F.rfft, c)
    raises(TypeError, "ihfft expects a real input tensor, but got ComplexFloat", F.ihfft, c)
    raises(TypeError, "rfftn expects a real-valued input tensor, but got ComplexFloat", F.rfft2,
           F.fft2(x.reshape(2, 2)))
    raises(NotImplementedError, "Unsupported dtype Half", F.fft, x.half())
    assert F.fft(tessel.tensor([1, 2, 3])).dtype == tessel.complex64


def test_fft_of_infinities_keeps_a_zero_imaginary_part():
    assert parts(F.rfft(tessel.tensor([INF, 0.0, 0.0, 0.0]))) == [[INF, 0.0]] * 3  # torch's (it was NaN)
    assert parts(F.fft(tessel.tensor([1.0, -INF, 2.0, 3.0]))) == [[-INF, 0.0], [-1.0, INF], [INF, 0.0], [-1.0, -INF]]


def test_fftfreq_edges_and_dtypes():
    assert list(F.fftfreq(0).shape) == [0]  # (ZeroDivisionError)
    close(F.rfftfreq(0), [NAN])
    close(F.fftfreq(4, d=0), [NAN, INF, -INF, -INF])  # torch's IEEE division
    assert F.rfftfreq(-1).tolist() == [-0.0]
    raises(RuntimeError, "fftfreq requires a floating point or complex dtype", F.fftfreq, 4, dtype=tessel.int64)
    raises(RuntimeError, "Trying to create tensor with negative dimension -1: [-1]", F.fftfreq, -1)
    raises(TypeError, "fft_fftfreq(): argument 'n' (position 1) must be int, not float", F.fftfreq, 4.0)
    previous = tessel.get_default_dtype()
    tessel.set_default_dtype(D)
    try:
        assert F.fftfreq(4).dtype == D and F.rfftfreq(3).dtype == D
    finally:
        tessel.set_default_dtype(previous)


# ---- special functions ----------------------------------------------------------------------------------------

def test_special_values_at_their_edges():
    close(S.gammainc(tessel.tensor([0.0, 0.0, 0.0, -1.0, 1.0]), tessel.tensor([1.0, 0.0, INF, 1.0, -1.0])),
          [1.0, NAN, 1.0, NAN, NAN])  # torch's: a = 0 puts all the mass at 0
    close(S.gammaincc(tessel.tensor([0.0, 0.0, 0.0, -1.0, 1.0]), tessel.tensor([1.0, 0.0, INF, 1.0, -1.0])),
          [0.0, NAN, 0.0, NAN, NAN])
    close(tessel.igamma(tessel.tensor([0.0, 2.0]), tessel.tensor([1.0, 1.0])), [1.0, 0.2642411176571153], rtol=1e-6)
    close(S.spherical_bessel_j0(f64([INF, -INF, 1e30])), [0.0, 0.0, 9.331468931175824e-33])
    close(S.i1(f64([INF, -INF, 1e4])), [NAN, NAN, INF])
    close(S.i0(tessel.tensor([88.0, 89.0, -89.0])), [7.034019512534214e+36, INF, INF], rtol=1e-6)  # float32 e^x
    close(S.i1(tessel.tensor([88.0, 89.0, -89.0])), [6.993938302030897e+36, INF, -INF], rtol=1e-6)
    close(S.polygamma(2, f64([INF, -INF, 1.0])), [NAN, -INF, -2.404113806319188])
    close(S.zeta(f64([INF, INF, INF, 3.0]), f64([2.0, 1.0, 0.5, INF])), [NAN, 1.0, INF, NAN])


def test_special_gradients_at_their_edges():
    assert grad_of(S.erfc, [INF, -INF, 30.0]) == [-0.0, -0.0, -0.0]  # torch's (NaN at ±inf)
    close(grad_of(S.digamma, [-1.0, -2.0, -3.0, 0.5]),
          [6.580790147320947e+32, 1.6451975368302367e+32, 7.311989052578831e+31, 4.934802202073678], rtol=1e-9)
    close(grad_of(S.digamma, [-1.0, -2.0, -3.0], tessel.float32),
          [1291369695936512.0, 322842423984128.0, 1.7351287771234304e+16], rtol=1e-6)  # (0 at the poles)
    close(grad_of(S.logit, [-0.1, 1.1, 0.5, 0.0]), [NAN, NAN, 4.0, INF])  # (-9.09 outside [0, 1])
    close(grad_of(lambda x: S.logit(x, eps=0.2), [-0.1, 1.1, 0.5, 0.1]), [0.0, 0.0, 4.0, 0.0])
    close(grad_of(S.i0, [INF, -INF, 1.0]), [NAN, NAN, 0.5651591039924851])
    close(grad_of(lambda x: S.polygamma(1, x), [INF, -INF, 1.0]), [NAN, -INF, -2.404113806319188])


_X = [0.25, 1.0, 1.75, 30.0, 123.5, -0.5, -40.0]
_BESSEL = {  # torch's, at points where its kernels are accurate
    "bessel_j0": [0.9844359292958528, 0.7651976865579665, 0.3690325301851523, -0.08636798358104034,
                  -0.07048462166325224, 0.938469807240813, 0.007366890584236952],
    "bessel_j1": [0.12402597732272692, 0.44005058574493355, 0.5801561976389932, -0.11875106261662309,
                  -0.013948992295177607, -0.24226845767487387, -0.126038318037585],
    "bessel_y0": [-0.9315730249300588, 0.08825696421567697, 0.4654926286469098, -0.11729573168666393,
                  -0.013663522162735267, NAN, NAN],
    "bessel_y1": [-2.7041052293152825, -0.7812128213002888, -0.2539729859462456, 0.08442557066174709,
                  0.07042988226469916, NAN, NAN],
    "modified_bessel_k0": [1.5415067512483027, 0.4210244382407082, 0.1553798123866036, 2.1324774964630563e-14,
                           2.6086759849369253e-55, NAN, NAN],
    "modified_bessel_k1": [3.747025974440712, 0.6019072301972346, 0.195477453474393, 2.1677320018915495e-14,
                           2.619216217694573e-55, NAN, NAN],
    "scaled_modified_bessel_k0": [1.9793338485985683, 1.1444630798068944, 0.8941490841572174, 0.22788666561625373,
                                  0.1126649050978669, NAN, NAN],
    "scaled_modified_bessel_k1": [4.811276588171025, 1.636153486263258, 1.1248950768625277, 0.2316541293777118,
                                  0.11312012235374949, NAN, NAN],
    "airy_ai": [0.2911639543485452, 0.13529241631288144, 0.05056988080579481, 3.2082175915504806e-49, 0.0,
                0.4757280916105395, -0.04593392343795248],
}


@pytest.mark.parametrize("name", sorted(_BESSEL))
def test_bessel_functions_of_the_second_kind_and_airy(name):
    close(getattr(S, name)(f64(_X)), _BESSEL[name], rtol=1e-11)  # (missing from tessel.special)
    assert getattr(S, name)(tessel.tensor([1, 2])).dtype == tessel.float32
    raises(NotImplementedError, "\"%s_cpu\" not implemented for 'Half'" % name, getattr(S, name),
           tessel.ones(2, dtype=tessel.float16))


def test_bessel_edges_and_gradients():
    edge = f64([0.0, -0.0, INF, -INF, -1.0])  # torch's values
    close(S.bessel_j0(edge), [1.0, 1.0, NAN, NAN, 0.7651976865579665])
    assert S.bessel_j1(edge).tolist()[:2] == [0.0, -0.0]
    close(S.bessel_y0(edge), [-INF, -INF, NAN, NAN, NAN])
    close(S.bessel_y1(edge), [-INF, -INF, NAN, NAN, NAN])
    close(S.modified_bessel_k0(edge), [INF, INF, 0.0, NAN, NAN])
    close(S.scaled_modified_bessel_k1(edge), [INF, INF, 0.0, NAN, NAN])
    close(S.airy_ai(edge), [0.3550280538878172, 0.3550280538878172, NAN, NAN, 0.5355608832923521])
    close(S.airy_ai(f64([-5.0, -12.0, 3.0])), [0.35076100902415286, -0.06655517505437396, 0.00659113935746072],
          rtol=1e-11)
    y = [0.0, 0.25, 1.0, 30.0]
    want = {"bessel_j0": [-0.0, -0.12402597732272692, -0.44005058574493355, 0.11875106261662309],
            "bessel_j1": [0.5, 0.4883320200049451, 0.32514710081303294, -0.0824096148271529],
            "bessel_y0": [INF, 2.7041052293152825, 0.7812128213002888, -0.08442557066174709],
            "bessel_y1": [INF, 9.884847892331072, 0.8694697855159658, -0.12010991737538884],
            "modified_bessel_k0": [-INF, -3.747025974440712, -0.6019072301972346, -2.1677320018915495e-14],
            "modified_bessel_k1": [-INF, -16.52961064901115, -1.0229316684379428, -2.2047352298594412e-14]}
    for name, values in want.items():
        close(grad_of(getattr(S, name), y), values, rtol=1e-11)
    x = f64([1.0, 2.5], requires_grad=True)
    g, = tessel.autograd.grad(S.bessel_j0(x).sum(), x, create_graph=True)
    close(tessel.autograd.grad(g.sum(), x)[0], [-0.32514710081303294, 0.24722141745404458], rtol=1e-11)
    assert not S.airy_ai(f64([1.0], requires_grad=True)).requires_grad  # no gradient, as torch's


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
