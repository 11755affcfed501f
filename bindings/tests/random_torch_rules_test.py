"""torch's CPU random draws, value for value (core/tensor/torch_random.h): a script seeded with manual_seed draws
torch's tensors, builds torch's initial weights, drops torch's dropout elements and so trains as torch does. Every
expected value below was printed by torch 2.15 (PyPI, on an AVX-512 Xeon: its AVX2 kernels; the DEFAULT_* ones with
ATEN_CPU_CAPABILITY=default)."""
import copy

import pytest

import tessel as torch

nn = torch.nn
F = torch.nn.functional

RANDN20 = [  # torch 2.15
    -1.1258398294448853, -1.152360200881958, -0.2505785822868347, -0.4338788092136383, 0.5988394618034363,
    -1.5550950765609741, -0.3413603901863098, 1.85300612449646, 0.46809640526771545, -0.1577124446630478,
    1.4436601400375366, 0.26604941487312317, 1.3893661499023438, 1.586334228515625, 0.946298360824585,
    -0.843676745891571, 0.9318265914916992, 1.2590092420578003, 2.0049805641174316, 0.05373690277338028]
RANDN5_3 = [  # torch 2.15
    1.5409960746765137, -0.293428897857666, -2.1787893772125244, 0.5684312582015991, -1.0845223665237427,
    -1.3985954523086548, 0.40334683656692505, 0.8380263447761536]
RAND5 = [  # torch 2.15
    0.49625658988952637, 0.7682217955589294, 0.08847743272781372, 0.13203048706054688, 0.30742281675338745]
UNIFORM = [  # torch 2.15
    0.1962565779685974, 0.4682217836380005, -0.21152257919311523, -0.16796952486038208, 0.007422804832458496,
    0.33407866954803467]
UNIFORM64 = [  # torch 2.15
    1.910159005419659, 1.1234595931993638, 0.3781488293823526]
RANDN_BF16 = [  # torch 2.15
    -1.125, -1.3515625, -1.6953125, 0.56640625, 0.79296875, 0.59765625, -1.5546875, -0.341796875, 1.8515625, 0.75,
    -0.5859375, -0.173828125, 0.18359375, 1.390625, 1.5859375, 0.9453125, -0.84375]
RANDN64_4 = [  # torch 2.15
    1.5409961082440433, -0.2934289057609464, -2.1787893820745574, 0.5684312772806678]
T_UNIFORM = [  # torch 2.15
    0.49625658988952637, 0.08847743272781372, 0.30742281675338745, 0.7682217955589294, 0.13203048706054688,
    0.6340786814689636]
T_NORMAL = [  # torch 2.15
    1.5409960746765137, -1.3985954523086548, -0.5966353416442871, 0.1227012425661087, -0.293428897857666,
    0.40334683656692505, 0.18203648924827576, -0.5663174986839294, -2.1787893772125244, 0.8380263447761536,
    -0.8566746115684509, 0.3731146454811096, 0.5684312582015991, -0.7192575931549072, 1.1006041765213013,
    -0.8919953107833862, -1.0845223665237427, -0.40334352850914, -1.0711873769760132, -1.5091077089309692]
LINEAR = [  # torch 2.15
    -0.004322517663240433, 0.3097158372402191, -0.4751853346824646, -0.4248946011066437, -0.2223689705133438,
    0.15482072532176971, -0.011439144611358643, 0.45777493715286255]
LINEAR64 = [  # torch 2.15
    0.5427704542528101, 0.23996970930833816, -0.046900537438113156, 0.48583757737745076, 0.16745942958373372,
    0.3361886278485809, -0.3711136225274598, -0.17192610627289664]
EMBEDDING = [  # torch 2.15
    1.5409960746765137, -0.293428897857666, -2.1787893772125244, 0.0, 0.0, 0.0, 0.40334683656692505,
    0.8380263447761536, -0.7192575931549072, -0.40334352850914, -0.5966353416442871, 0.18203648924827576]
CONV = [  # torch 2.15
    -0.003743410110473633, 0.26822179555892944, -0.4115225672721863, -0.3679695129394531, -0.19257718324661255,
    0.13407868146896362, -0.009906589984893799, 0.39644473791122437, -0.04437202215194702, 0.1323062777519226]
AFTER_COPY = [  # torch 2.15
    0.4900934100151062, 0.8964447379112244]
BERN_ = [  # torch 2.15
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0]
BERN_T = [  # torch 2.15
    0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
DROPOUT = [  # torch 2.15
    0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 11.666666030883789, 13.333333015441895, 15.0, 16.66666603088379]
LOG_NORMAL = [  # torch 2.15
    2.4235877990722656, 1.5321052074432373, 0.9562868475914001, 1.9004825353622437]
CAUCHY = [  # torch 2.15
    22.195459365844727, 2.5295345783233643, 0.743401288986206, 8.8661470413208]
GEOMETRIC = [  # torch 2.15
    1.0, 1.0, 3.0, 1.0, 2.0, 1.0]
TRUNC = [  # torch 2.15
    0.4396958351135254, 0.11241118609905243, -0.2505785822868347, -0.4338788092136383, 0.5988394618034363,
    -0.4503297507762909, -0.3413603901863098, -0.5553584098815918, 0.46809640526771545, -0.1577124446630478,
    0.5073344111442566, 0.26604941487312317, -0.3656187951564789, 0.1885535717010498, 0.946298360824585,
    -0.843676745891571, 0.9318265914916992, -0.19383712112903595, 0.44551217555999756, 0.05373690277338028]
TRUNC_TAIL = [  # torch 2.15
    2.0223257541656494, 2.1688590049743652, 2.088477373123169, 2.132030487060547, 2.3074228763580322,
    2.373417377471924]
SPARSE = [  # torch 2.15
    0.0, 0.0, 0.0, 0.005684312898665667, 0.0, 0.0, 0.004033468663692474, 0.008380263112485409,
    -0.007192575838416815, 0.0, -0.0059663536958396435, 0.0018203648505732417]
ORTH = [  # torch 2.15
    0.561532735824585, -0.10692428797483444, -0.7939420342445374, 0.20713403820991516, -0.39059826731681824,
    -0.7681001424789429, -0.040867771953344345, 0.50575190782547, -0.7138387560844421, 0.21100866794586182,
    -0.6063022017478943, -0.27983400225639343]
TRAIN = [  # torch 2.15
    1.1438398361206055, 1.0404481887817383, 1.0641510486602783]
DEFAULT_RANDN20 = [  # torch 2.15
    -1.1258398294448853, -1.152360200881958, -0.2505785822868347, -0.4338788390159607, 0.5988394618034363,
    -1.5550950765609741, -0.34136030077934265, 1.85300612449646, 0.46809640526771545, -0.1577124446630478,
    1.4436601400375366, 0.26604941487312317, 1.3893661499023438, 1.5863343477249146, 0.946298360824585,
    -0.8436768054962158, 0.931826651096344, 1.2590092420578003, 2.0049805641174316, 0.05373689904808998]
DEFAULT_UNIFORM = [  # torch 2.15
    0.1962565779685974, 0.4682217836380005, -0.21152257919311523, -0.16796952486038208, 0.007422804832458496,
    0.33407866954803467]

DROPOUT_T = [  # torch 2.15
    0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 0.0, 2.0, 2.0]
RANDN_LIKE_T = [  # torch 2.15
    1.5409960746765137, -1.0845223665237427, -0.7192575931549072, -0.293428897857666, -1.3985954523086548,
    -0.40334352850914, -2.1787893772125244, 0.40334683656692505, -0.5966353416442871, 0.5684312582015991,
    0.8380263447761536, 0.18203648924827576]
RANDN_LIKE_T_STRIDE = [  # torch 2.15
    1, 4]
SDPA_DROPOUT = [  # torch 2.15
    0.10002791881561279, -0.25314217805862427, 0.03702951595187187, 0.5118398666381836, -1.5028846263885498,
    0.20373636484146118, 0.2149084359407425, -1.6766496896743774, -0.0007248371839523315, 0.6670129895210266,
    -1.3322675228118896, -0.17303861677646637, 0.17591017484664917]
PACKED_LSTM = [  # torch 2.15
    -0.17833790183067322, 0.06999717652797699, -0.09900404512882233, 0.07737506181001663, -0.22123490273952484,
    -0.30367130041122437, -0.061541128903627396, -0.11778754740953445, -0.05011199042201042, -0.02039307728409767,
    -0.014012857340276241, 0.0010296368272975087, 0.024432631209492683, -0.027138734236359596, -0.04419158399105072,
    -0.08408694714307785, -0.1808246374130249, 0.06847864389419556, -0.04489739611744881, -0.10565420240163803,
    -0.11480256915092468, 0.03558867424726486, 0.02788262441754341, 0.08249219506978989, -0.09045924991369247,
    -0.04986533150076866, -0.14765456318855286, 0.029861774295568466, 0.02973221428692341, 0.01112303789705038,
    -0.10289240628480911, -0.10524345934391022, -0.13014864921569824, 0.12375028431415558, 0.018722066655755043,
    0.042783718556165695, 0.006412327289581299]
ALPHA_DROPOUT = [  # torch 2.15
    -0.7791939377784729, -0.7791939377784729, 2.5520036220550537, -0.7791939377784729, -0.7791939377784729,
    -0.7791939377784729]
FEATURE_ALPHA = [  # torch 2.15
    -0.7791939377784729, -0.7791939377784729, -0.7791939377784729, -0.7791939377784729, 1.6655988693237305,
    1.6655988693237305, -0.7791939377784729, -0.7791939377784729]
RRELU = [  # torch 2.15
    -0.3270943760871887, 2.0, -0.8173874616622925, -0.11035238951444626, 0.4900934100151062]
GUMBEL = [  # torch 2.15
    0.09141199290752411, 0.26065272092819214, 0.5214310884475708, 0.12650418281555176, 0.455627977848053]
BERN_P = [  # torch 2.15
    0.0, 0.0, 1.0, 0.0, 0.0]
GEOMETRIC_DIST = [  # torch 2.15
    1.0, 0.0, 6.0, 2.0, 3.0, 0.0]
GAMMA = [  # torch 2.15
    4.5526227951049805, 0.005511899013072252, 1.1754943508222875e-38, 9.072978973388672, 0.6816085577011108]
POISSON = [  # torch 2.15
    2.0, 28.0, 0.0, 3.0, 94.0, 0.39709991216659546]
BINOMIAL = [  # torch 2.15
    6.0, 8.0, 39.0, 45.0, 0.20812976360321045]
DIRICHLET = [  # torch 2.15
    0.00039424869464710355, 0.05942697823047638, 0.9401787519454956, 0.6814843416213989, 0.004486860241740942,
    0.314028799533844]
BETA = [  # torch 2.15
    0.005456698127090931, 0.32245442271232605, 0.5421353578567505]
STUDENT_T = [  # torch 2.15
    1.371144413948059, -0.3094601631164551, -3.3711321353912354]
NEG_BINOMIAL = [  # torch 2.15
    3.0, 14.0, 1.0, 8.0]

def values(t):
    return [float(v) for v in t.detach().double().flatten().tolist()]


@pytest.fixture(autouse=True)
def _avx2_kernels():
    torch._C._force_torch_cpu_kernels("avx2")  # torch's kernels on any AVX2 machine (every tessel machine)
    yield
    torch._C._force_torch_cpu_kernels("auto")


def test_rand_randn_uniform_normal_are_torchs():
    torch.manual_seed(0)
    assert values(torch.randn(20)) == RANDN20  # blocks of 16 Box-Muller pairs, the tail redone
    torch.manual_seed(0)
    a, b = torch.randn(5), torch.randn(3)  # one at a time: the second of a pair is held for the next draw
    assert values(a) + values(b) == RANDN5_3
    torch.manual_seed(0)
    assert values(torch.rand(5)) == RAND5
    torch.manual_seed(0)
    assert values(torch.empty(6).uniform_(-0.3, 0.7)) == UNIFORM
    torch.manual_seed(0)
    assert values(torch.empty(3, dtype=torch.float64).uniform_(-1, 2)) == UNIFORM64
    torch.manual_seed(0)
    assert values(torch.randn(17, dtype=torch.bfloat16)) == RANDN_BF16
    torch.manual_seed(0)
    assert values(torch.randn(4, dtype=torch.float64)) == RANDN64_4


def test_non_contiguous_draws_follow_memory_order():
    torch.manual_seed(0)
    assert values(torch.empty(3, 2).t().uniform_()) == T_UNIFORM
    torch.manual_seed(0)
    assert values(torch.empty(4, 5).t().normal_()) == T_NORMAL


def test_default_capability_kernels():
    torch._C._force_torch_cpu_kernels("default")  # torch without AVX2: libm's logf / sincos, no fused multiply-adds
    torch.manual_seed(0)
    assert values(torch.randn(20)) == DEFAULT_RANDN20
    torch.manual_seed(0)
    assert values(torch.empty(6).uniform_(-0.3, 0.7)) == DEFAULT_UNIFORM
    assert DEFAULT_RANDN20 != RANDN20


def test_module_initial_weights_are_torchs():
    torch.manual_seed(0)
    m = nn.Linear(3, 2)
    assert values(m.weight) + values(m.bias) == LINEAR
    assert not m.weight.is_meta
    torch.manual_seed(0)
    m = nn.Linear(3, 2, dtype=torch.float64)  # kaiming's bound in float64 as torch's Python computes it
    assert values(m.weight) + values(m.bias) == LINEAR64
    torch.manual_seed(0)
    assert values(nn.Embedding(4, 3, padding_idx=1).weight) == EMBEDDING
    torch.manual_seed(0)
    m = nn.Conv2d(1, 2, 2)
    assert values(m.weight) + values(m.bias) == CONV


def test_deepcopy_draws_nothing():
    torch.manual_seed(0)
    m = nn.Linear(2, 2)
    c = copy.deepcopy(m)  # rebuilt without a draw: the generator stays where torch's is
    assert values(torch.rand(2)) == AFTER_COPY
    assert torch.equal(c.weight, m.weight) and not c.weight.is_meta


def test_bernoulli_dropout_and_other_distributions():
    torch.manual_seed(0)
    assert values(torch.empty(10).bernoulli_(0.3)) == BERN_
    torch.manual_seed(0)
    assert values(torch.bernoulli(torch.linspace(0, 1, 10))) == BERN_T
    torch.manual_seed(0)
    assert values(nn.functional.dropout(torch.arange(1., 11.), 0.4)) == DROPOUT
    torch.manual_seed(0)
    assert values(torch.empty(4).log_normal_(0.5, 0.25)) == LOG_NORMAL
    torch.manual_seed(0)
    assert values(torch.empty(4).cauchy_(1.0, 2.0)) == CAUCHY
    torch.manual_seed(0)
    g = torch.empty(6, dtype=torch.int64).geometric_(0.3)  # any dtype, as torch's kernel
    assert g.dtype == torch.int64 and values(g) == GEOMETRIC


def test_init_functions_are_torchs():
    torch.manual_seed(0)
    assert values(nn.init.trunc_normal_(torch.empty(20), std=1.0, a=-1.0, b=1.0)) == TRUNC
    torch.manual_seed(0)
    assert values(nn.init.trunc_normal_(torch.empty(6), mean=0.0, std=1.0, a=2.0, b=3.0)) == TRUNC_TAIL
    torch.manual_seed(0)
    assert values(nn.init.sparse_(torch.empty(4, 3), 0.5)) == SPARSE
    torch.manual_seed(0)
    got = values(nn.init.orthogonal_(torch.empty(3, 4)))  # LAPACK's QR rounds its own way: float32 rounding
    assert max(abs(g - e) for g, e in zip(got, ORTH)) < 1e-6


def test_seeded_training_loop_matches_torch():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.25), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses == pytest.approx(TRAIN, rel=1e-6)


def test_rng_state_keeps_the_held_normal():
    torch.manual_seed(3)
    torch.randn(3)  # odd count, one at a time: a normal is held
    state = torch.get_rng_state()
    assert tuple(state.shape) == (5,) and int(state[3]) == 1
    b = torch.randn(5)
    torch.set_rng_state(state)
    assert torch.equal(torch.randn(5), b)
    g = torch.Generator().manual_seed(4)
    torch.randn(1, generator=g)
    held = g.next_normal
    assert held is not None
    g.manual_seed(4)
    assert g.next_normal is None  # seeding clears it, as torch's


def test_refusals():
    with pytest.raises(RuntimeError, match="normal_kernel_cpu\" not implemented for 'Long'"):
        torch.empty(3, dtype=torch.int64).normal_()
    with pytest.raises(RuntimeError, match="geometric_ expects p to be in"):
        torch.empty(3).geometric_(1.5)
    with pytest.raises(RuntimeError, match="bernoulli_tensor_cpu_p_"):
        torch.empty(3).bernoulli_(torch.ones(3, dtype=torch.int64))


def test_like_factories_and_dropout_follow_memory_order():
    torch.manual_seed(0)
    assert values(F.dropout(torch.ones(3, 4).t(), 0.5)) == DROPOUT_T  # torch's mask on a transposed activation
    torch.manual_seed(0)
    x = torch.randn_like(torch.zeros(3, 4).t())
    assert values(x) == RANDN_LIKE_T and list(x.stride()) == RANDN_LIKE_T_STRIDE


def test_dropout_inside_layers_is_torchs():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 1, 4, 3) for _ in range(3))
    torch.manual_seed(0)
    got = values(F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)) + values(torch.rand(1))
    assert got == pytest.approx(SDPA_DROPOUT, rel=1e-6, abs=1e-7)  # torch's math kernel: F.dropout's mask
    torch.manual_seed(1)
    lstm = nn.LSTM(5, 6, num_layers=2, batch_first=True, dropout=0.5)
    x = torch.randn(3, 4, 5)
    packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor([4, 2, 3]), batch_first=True, enforce_sorted=False)
    torch.manual_seed(2)
    _, (h, _) = lstm(packed)  # the inter-layer dropout on the packed data, as torch's
    assert values(h) + values(torch.rand(1)) == pytest.approx(PACKED_LSTM, rel=1e-5, abs=1e-6)


def test_other_random_functions_are_torchs():
    torch.manual_seed(0)
    assert values(F.alpha_dropout(torch.arange(6.), 0.5, True)) == pytest.approx(ALPHA_DROPOUT, rel=1e-6)
    torch.manual_seed(0)
    assert values(F.feature_alpha_dropout(torch.ones(1, 4, 2), 0.5, True)) == pytest.approx(FEATURE_ALPHA, rel=1e-6)
    torch.manual_seed(0)
    assert values(F.rrelu(torch.tensor([-1., 2., -3., -0.5]), training=True)) + values(torch.rand(1)) == RRELU
    torch.manual_seed(0)
    got = values(F.gumbel_softmax(torch.zeros(4), tau=1.0)) + values(torch.rand(1))
    assert got == pytest.approx(GUMBEL, rel=1e-6)
    torch.manual_seed(0)
    assert values(torch.bernoulli(torch.zeros(5), 0.5)) == BERN_P
    torch.manual_seed(0)
    assert values(torch.distributions.Geometric(torch.tensor([0.3, 0.6])).sample((3,))) == GEOMETRIC_DIST


def test_rejection_samplers_and_their_distributions_are_torchs():
    torch.manual_seed(0)
    assert values(torch._standard_gamma(torch.tensor([2.0, 0.5, 0.01, 7.0]))) + values(torch.rand(1)) == GAMMA
    torch.manual_seed(0)
    assert values(torch.poisson(torch.tensor([1.0, 20.0, 0.0, 3.5, 100.0]))) + values(torch.rand(1)) == POISSON
    torch.manual_seed(0)
    got = torch.binomial(torch.tensor([10., 10., 100., 50.]), torch.tensor([0.3, 0.8, 0.4, 0.9]))
    assert values(got) + values(torch.rand(1)) == BINOMIAL
    torch.manual_seed(0)
    assert values(torch._sample_dirichlet(torch.tensor([[0.5, 1.0, 2.0], [3.0, 0.1, 1.0]]))) == DIRICHLET
    D = torch.distributions
    torch.manual_seed(0)
    assert values(D.Beta(torch.tensor([0.4]), torch.tensor([0.4])).sample((3,))) == BETA  # mixup's draw
    torch.manual_seed(0)
    assert values(D.StudentT(torch.tensor([3.0])).sample((3,))) == pytest.approx(STUDENT_T, rel=1e-6)
    torch.manual_seed(0)
    assert values(D.NegativeBinomial(5, torch.tensor([0.3, 0.8])).sample((2,))) == NEG_BINOMIAL


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q"]))
