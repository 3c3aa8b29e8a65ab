"""Tests for pseudopairs.mining.nearest_neighbours: every criterion against a brute-force float64
evaluation of the same definition (random data, near-ties, duplicates, blocks smaller than the
data), hand-computed cases where a hubness-aware criterion changes the cosine argmax, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pseudopairs import mining as mn
from pseudopairs.mining import criteria
from pseudopairs.mining.criteria import dynamic_inverted_softmax as dis
from pseudopairs.mining.criteria import inverted_softmax as isf
from pseudopairs.mining.criteria import sinkhorn as sk
from pseudopairs.mining.criteria.inverted_softmax import log_sum_exp_columns64
from pseudopairs.mining.search import SearchContext
from pseudopairs.similarity import bf16_mode, cosine_error_bound, unit_rows

torch.set_num_threads(1)
EXACT = ("cosine", "mutual", "csls", "margin")
BLOCKS = (None, 3, (5, 7), (64, 9))
# candidate GEMM: float32, or bf16 with each CPU kernel (pseudopairs.similarity.lowp)
PATHS = [(False, None), (True, "onednn"), (True, "mkl"), (True, "emulated")]
PATH_IDS = ["float32", "bf16-onednn", "bf16-mkl", "bf16-emulated"]


def assert_same(got, want):
    idx, score = got
    assert idx.dtype == np.int64 and score.dtype == np.float32
    np.testing.assert_array_equal(idx, want[0])
    np.testing.assert_array_equal(score, want[1])  # NaN where both reject


def near_tie_data(seed: int, n: int = 60, m: int = 45, dim: int = 12):
    """Unnormalised float32 rows with exact duplicates, power-of-two multiples (same direction,
    same exact cosine) and rows one ulp apart, placed in different blocks; queries near them."""
    rng = np.random.default_rng(seed)
    database = (rng.standard_normal((m, dim)) * rng.uniform(0.5, 3, (m, 1))).astype(np.float32)
    database[40] = database[3]  # duplicate far away (other block)
    database[22] = database[3] * 4  # same direction
    database[9] = database[3]
    database[9, 0] = np.nextafter(database[9, 0], np.float32(np.inf))  # one ulp away
    database[31] = database[17]
    database[31, 5] = np.nextafter(database[31, 5], np.float32(-np.inf))
    queries = rng.standard_normal((n, dim)).astype(np.float32)
    queries[: n // 2] = database[rng.choice([3, 9, 17, 31], n // 2)] + \
        1e-3 * rng.standard_normal((n // 2, dim)).astype(np.float32)
    queries[5] = database[3] * 0.5  # exactly the direction of 3, 22 and 40
    return queries, database


@pytest.mark.parametrize("criterion", EXACT)
@pytest.mark.parametrize("seed", range(3))
def test_exact_criteria_equal_brute_force(criterion, seed):
    queries, database = near_tie_data(seed)
    want = mn.nearest_neighbours_reference(queries, database, criterion=criterion)
    for block in BLOCKS:
        assert_same(mn.nearest_neighbours(queries, database, criterion=criterion, block_size=block), want)
    # the data really holds the near-ties the definition has to settle
    cos = mn.cosine_matrix64(queries, database)
    assert cos[5, 3] == cos[5, 22] == cos[5, 40]  # exact ties: the lowest index wins
    assert 0 < abs(cos[:, 3] - cos[:, 9]).max() < cosine_error_bound(12)
    if criterion in ("cosine", "mutual"):
        assert want[0][5] == 3


def test_cosine_ties_go_to_the_lowest_index_across_blocks():
    rng = np.random.default_rng(11)
    database = rng.standard_normal((30, 5)).astype(np.float32)
    database[[4, 12, 25]] = database[20]  # 4 duplicates of row 20 (the lowest is 4)
    queries = np.vstack([database[20] * 3, database[20] + 0.001, rng.standard_normal((3, 5))]).astype(np.float32)
    for block in (None, 1, (2, 3), (1, 4)):
        idx, score = mn.nearest_neighbours(queries, database, block_size=block)
        assert idx[0] == 4 and idx[1] == 4
        assert score[0] == np.float32(1.0)
        assert_same((idx, score), mn.nearest_neighbours_reference(queries, database))


def test_one_ulp_apart_is_decided_in_float64():
    # q = (1, 1); d0 = (1, 0); d1 = (1 - 2**-24, 2**-23): q·d1 = 1 + 2**-24 rounds to 1 in float32
    # (a float32 tie with d0), but d1 is exactly better... after normalisation the exact cosines
    # decide, whatever float32 says.
    queries = np.array([[1.0, 1.0]], dtype=np.float32)
    database = np.array([[1.0, 0.0], [1 - 2.0**-24, 2.0**-23]], dtype=np.float32)
    cos = mn.cosine_matrix64(queries, database)
    assert cos[0, 1] > cos[0, 0] and cos[0, 1] - cos[0, 0] < 1e-6
    idx, score = mn.nearest_neighbours(queries, database)
    assert idx.tolist() == [1] and score[0] == np.float32(cos[0, 1])


@pytest.mark.parametrize("seed", range(2))
def test_inverted_softmax_matches_brute_force_up_to_its_normaliser(seed):
    queries, database = near_tie_data(seed + 10, n=80, m=50)
    beta = 20.0
    cos = mn.cosine_matrix64(queries, database)
    crit = beta * cos - log_sum_exp_columns64(cos, beta)[None, :]
    want = mn.nearest_neighbours_reference(queries, database, criterion="inverted_softmax", beta=beta)
    # |our normaliser − float64 normaliser| ≤ beta·E + rounding (see ColumnLogSumExp.error_bound)
    tol = beta * cosine_error_bound(12) + 1e-5
    for block in BLOCKS:
        idx, score = mn.nearest_neighbours(queries, database, criterion="inverted_softmax", beta=beta,
                                           block_size=block)
        rows = np.arange(len(idx))
        assert np.all(crit[rows, idx] >= crit[rows, want[0]] - 2 * tol)  # a near-best pick
        np.testing.assert_allclose(score, crit[rows, idx], rtol=0, atol=tol)
        top2 = -np.sort(-crit, axis=1)[:, :2]
        clear = top2[:, 0] - top2[:, 1] > 2 * tol  # no near-tie within the normaliser's error
        assert clear.sum() > 20
        np.testing.assert_array_equal(idx[clear], want[0][clear])
        # rows of one direction (3, 22 = 4·row 3, 40 = row 3) share one normaliser: their exact
        # ties still go to the lowest index
        assert not np.isin(idx, [22, 40]).any() and np.isin(idx, [3, 9]).any()


def test_torch_inputs_and_the_torch_code_path():
    queries, database = near_tie_data(3)
    want = mn.nearest_neighbours_reference(queries, database, criterion="csls", k=3)
    assert_same(mn.nearest_neighbours(torch.from_numpy(queries), torch.from_numpy(database).double(),
                                      criterion="csls", k=3), want)
    # The CUDA path's code (torch blocks and reductions), run on CPU tensors.
    q, d = unit_rows(queries, name="q"), unit_rows(database, name="d")
    for criterion, k in (("cosine", None), ("mutual", None), ("csls", 3), ("margin", 2)):
        want = mn.nearest_neighbours_reference(queries, database, criterion=criterion, k=k)
        ctx = SearchContext(q=q, d=d, device=torch.device("cpu"), rows=7, cols=11, progress=False, threads=1)
        got = criteria.get(criterion).search(ctx, criteria.check_params(criterion, {"k": k} if k else {}))
        assert_same(got, want)


def test_dtypes_and_scale_do_not_matter_for_normalised_directions():
    rng = np.random.default_rng(5)
    queries = rng.standard_normal((20, 8))
    database = rng.standard_normal((15, 8))
    base = mn.nearest_neighbours(queries.astype(np.float32), database.astype(np.float32))
    scaled = mn.nearest_neighbours(queries.astype(np.float32) * 8, database.astype(np.float32) / 2)
    assert_same(scaled, base)
    assert_same(mn.nearest_neighbours(queries.astype(np.float16), database),
                mn.nearest_neighbours_reference(queries.astype(np.float16), database))
    assert_same(mn.nearest_neighbours(queries, database.astype(np.float64)),
                mn.nearest_neighbours_reference(queries, database))


# ---------------------------------------------------------------------------------------------
# Hand-computed cases: a hub that is every query's cosine match
# ---------------------------------------------------------------------------------------------

# cos(query, database) by construction:    h     a     b
HUB = np.array([[0.54, 0.48, 0.06],     # q0
                [0.53, 0.06, 0.48],     # q1
                [0.52, 0.12, 0.12]])    # q2


def hub_inputs():
    """Queries (unnormalised ×3) whose cosines with the three basis vectors are HUB."""
    queries = np.hstack([HUB, np.sqrt(1 - (HUB**2).sum(axis=1, keepdims=True))]) * 3
    return queries, np.eye(4)[:3]


def test_hand_case_cosine_and_mutual():
    queries, database = hub_inputs()
    idx, score = mn.nearest_neighbours(queries, database)
    assert idx.tolist() == [0, 0, 0]  # h is everybody's match
    np.testing.assert_allclose(score, [0.54, 0.53, 0.52], rtol=1e-6)
    idx, score = mn.nearest_neighbours(queries, database, criterion="mutual")
    assert idx.tolist() == [0, -1, -1]  # h's own nearest query is q0 (0.54)
    assert score[0] == pytest.approx(0.54) and np.isnan(score[1:]).all()


def test_hand_case_csls():
    # k = 2: r_q = (.54+.48)/2 = .51, (.53+.48)/2 = .505, (.52+.12)/2 = .32;
    #        r_d = h (.54+.53)/2 = .535, a (.48+.12)/2 = .30, b (.48+.12)/2 = .30.
    # q0: h 1.08-.51-.535 = .035, a .96-.51-.30 = .15 → a;  q1: b .96-.505-.30 = .155 > h .02 → b;
    # q2: h 1.04-.32-.535 = .185 > a/b .24-.32-.30 = -.38 → h.
    queries, database = hub_inputs()
    idx, score = mn.nearest_neighbours(queries, database, criterion="csls", k=2)
    assert idx.tolist() == [1, 2, 0]
    np.testing.assert_allclose(score, [0.15, 0.155, 0.185], atol=1e-6)


def test_hand_case_margin():
    # k = 2, same r_q, r_d: margin = cos / ((r_q + r_d)/2)
    # q0: h .54/.5225 = 1.03349, a .48/.405 = 1.18519 → a;  q1: h .53/.52 = 1.01923,
    # b .48/.4025 = 1.19255 → b;  q2: h .52/.4275 = 1.21637, a .12/.31 = .38710 → h.
    queries, database = hub_inputs()
    idx, score = mn.nearest_neighbours(queries, database, criterion="margin", k=2)
    assert idx.tolist() == [1, 2, 0]
    np.testing.assert_allclose(score, [0.48 / 0.405, 0.48 / 0.4025, 0.52 / 0.4275], rtol=1e-6)


def test_hand_case_inverted_softmax():
    # beta = 10: L(h) = log(e^5.4 + e^5.3 + e^5.2) = 6.401942, L(a) = L(b) = log(e^4.8 + e^.6 + e^1.2)
    # = 4.841449. q0: h 5.4-6.401942 = -1.001942, a 4.8-4.841449 = -.041449 → a; q1 → b likewise;
    # q2: h 5.2-6.401942 = -1.201942 > a 1.2-4.841449 → h.
    queries, database = hub_inputs()
    idx, score = mn.nearest_neighbours(queries, database, criterion="inverted_softmax", beta=10)
    assert idx.tolist() == [1, 2, 0]
    np.testing.assert_allclose(score, [-0.041449, -0.041449, -1.201942], atol=2e-5)


def test_margin_needs_positive_neighbourhoods():
    queries = np.array([[1.0, 0.0], [0.0, 1.0]])
    database = np.array([[-1.0, 0.0], [0.0, -1.0]])  # r_q = r_d = 0 with k = 1
    with pytest.raises(ValueError, match="r_q \\+ r_d must be positive"):
        mn.nearest_neighbours(queries, database, criterion="margin", k=1)


# ---------------------------------------------------------------------------------------------
# Bad inputs
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("queries,database,message", [
    (np.ones(3), np.ones((2, 3)), "queries: expected a 2-D"),
    (np.ones((2, 3)), np.ones((2, 3, 1)), "database: expected a 2-D"),
    (np.ones((2, 3)), np.ones((2, 4)), "queries have 3 dimensions but database rows have 4"),
    (np.ones((0, 3)), np.ones((2, 3)), "queries: no rows"),
    (np.ones((2, 3)), np.ones((0, 3)), "database: no rows"),
    (np.array([[1.0, np.nan]]), np.ones((2, 2)), "queries: row 0 contains NaN"),
    (np.ones((2, 2)), np.array([[1.0, 1.0], [1.0, np.inf]]), "database: row 1 contains NaN or infinite"),
    (np.ones((2, 2)), np.array([[1.0, 1.0], [0.0, 0.0]]), "database: row 1 is all zeros"),
    (np.array([[0.0, 0.0]]), np.ones((2, 2)), "queries: row 0 is all zeros"),
    (np.array([[True, False]]), np.ones((2, 2)), "queries: expected real numbers"),
])
def test_bad_inputs(queries, database, message):
    with pytest.raises(ValueError, match=message):
        mn.nearest_neighbours(queries, database)


def test_bad_options():
    queries, database = hub_inputs()
    with pytest.raises(ValueError, match="criterion must be one of"):
        mn.nearest_neighbours(queries, database, criterion="hubless")
    with pytest.raises(ValueError, match="k=4 exceeds the 3 database rows"):
        mn.nearest_neighbours(queries, database, criterion="csls", k=4)
    with pytest.raises(ValueError, match="k=4 exceeds the 3 queries"):
        mn.nearest_neighbours(queries, np.eye(4), criterion="margin", k=4)
    with pytest.raises(ValueError, match="k must be a positive whole number"):
        mn.nearest_neighbours(queries, database, criterion="csls", k=0)
    with pytest.raises(ValueError, match="k is only used by"):
        mn.nearest_neighbours(queries, database, k=3)
    with pytest.raises(ValueError, match="beta must be a positive finite"):
        mn.nearest_neighbours(queries, database, criterion="inverted_softmax", beta=-1)
    with pytest.raises(ValueError, match="beta is only used by"):
        mn.nearest_neighbours(queries, database, criterion="csls", k=2, beta=10)
    for block in (0, (2, 0), (1, 2, 3), 2.5):
        with pytest.raises(ValueError, match="block_size"):
            mn.nearest_neighbours(queries, database, block_size=block)
    with pytest.raises(TypeError):
        mn.nearest_neighbours(queries, database, "cosine")  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# The bf16 candidate pass: forced on (each CPU kernel) and off, the same bits as brute force
# ---------------------------------------------------------------------------------------------


def context(queries, database, *, device="cpu", rows=7, cols=11):
    return SearchContext(q=unit_rows(queries, name="q"), d=unit_rows(database, name="d"), device=device,
                         rows=rows, cols=cols, progress=False, threads=1)


@pytest.mark.parametrize("criterion", EXACT)
@pytest.mark.parametrize("enabled,kernel", PATHS, ids=PATH_IDS)
def test_exact_criteria_on_each_candidate_path(criterion, enabled, kernel):
    for seed in range(2):
        queries, database = near_tie_data(seed)
        k = {"csls": 3, "margin": 2}.get(criterion)
        want = mn.nearest_neighbours_reference(queries, database, criterion=criterion, k=k)
        with bf16_mode(enabled, kernel=kernel):
            for block in BLOCKS:
                assert_same(mn.nearest_neighbours(queries, database, criterion=criterion, k=k, block_size=block), want)
            ctx = context(queries, database, device=torch.device("cpu"))  # the torch (CUDA) code
            assert ctx.path == ("bf16" if enabled else "float32")
            assert ctx.E > ctx.E32 if enabled else ctx.E == ctx.E32
            got = criteria.get(criterion).search(ctx, criteria.check_params(criterion, {"k": k} if k else {}))
            assert_same(got, want)


def test_the_bf16_window_holds_one_ulp_neighbours_and_wide_ties():
    # The bf16 window is ≈ 64× the float32 one: many candidates, all settled in float64.
    queries, database = near_tie_data(7, n=90, m=70, dim=300)
    want = mn.nearest_neighbours_reference(queries, database)
    with bf16_mode(True, kernel="onednn"):
        ctx = context(queries, database, device="cpu")
        assert 30 * ctx.E32 < ctx.E < 4 * 2.0**-8  # measured rounding errors: far below a-priori
        assert_same(mn.nearest_neighbours(queries, database, block_size=(16, 16)), want)
    with bf16_mode(False):
        assert_same(mn.nearest_neighbours(queries, database, block_size=(16, 16)), want)


# ---------------------------------------------------------------------------------------------
# Criteria with accumulated normalisers: exact for their normalisers, on every path
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("enabled,kernel", PATHS, ids=PATH_IDS)
@pytest.mark.parametrize("seed", range(2))
def test_normalised_criteria_are_exact_for_their_normalisers(enabled, kernel, seed):
    queries, database = near_tie_data(seed + 20, n=70, m=50)
    cos = mn.cosine_matrix64(queries, database)
    with bf16_mode(enabled, kernel=kernel):
        for device, rows, cols in (("cpu", 64, 64), ("cpu", 5, 7), (torch.device("cpu"), 7, 11)):
            ctx = context(queries, database, device=device, rows=rows, cols=cols)
            L = isf.normaliser(ctx, 20.0)
            assert_same(isf.search(ctx, {"beta": 20.0}), isf.reference_given(cos, 20.0, L))
            for k in (1, 3):
                params = {"beta": 20.0, "k": k}
                assert_same(dis.search(ctx, params), dis.reference_given(cos, params, L))
            sc = sk.scalings(ctx, 30.0, 5, 0.0)
            assert sc.iterations == 5
            assert_same(sk.search(ctx, {"beta": 30.0, "iterations": 5, "tol": 0.0}),
                        sk.reference_given(cos, 30.0, sc.g, sc.L))


def test_normalisers_do_not_depend_on_the_candidate_path():
    # normaliser passes always run the float32 GEMM: the bf16 path changes no bit of any criterion
    queries, database = near_tie_data(31, n=70, m=50)
    for criterion, params in (("inverted_softmax", {}), ("dynamic_inverted_softmax", {"k": 2}),
                              ("sinkhorn", {"iterations": 4, "tol": 0.0})):
        with bf16_mode(False):
            want = mn.nearest_neighbours(queries, database, criterion=criterion, block_size=(8, 16), **params)
        for kernel in ("onednn", "mkl"):
            with bf16_mode(True, kernel=kernel):
                assert_same(mn.nearest_neighbours(queries, database, criterion=criterion, block_size=(8, 16),
                                                  **params), want)


@pytest.mark.parametrize("seed", range(2))
def test_dynamic_inverted_softmax_gating_and_brute_force(seed):
    queries, database = near_tie_data(seed + 40, n=80, m=50)
    cos = mn.cosine_matrix64(queries, database)
    want = mn.nearest_neighbours_reference(queries, database, criterion="dynamic_inverted_softmax")
    topk = np.argsort(-cos, axis=1, kind="stable")[:, :1]
    gated = dis.normalised_queries(topk, 50)
    assert gated.any() and not gated.all()  # both kinds of query occur
    nearest, _ = mn.nearest_neighbours_reference(queries, database)
    isf_ref = mn.nearest_neighbours_reference(queries, database, criterion="inverted_softmax", beta=20.0)
    np.testing.assert_array_equal(want[0][~gated], nearest[~gated])
    np.testing.assert_array_equal(want[0][gated], isf_ref[0][gated])
    beta, tol = 20.0, 20.0 * cosine_error_bound(12) + 1e-5  # the normaliser's bound, as for isf
    crit = beta * cos - log_sum_exp_columns64(cos, beta)[None, :]
    for block in BLOCKS:
        idx, score = mn.nearest_neighbours(queries, database, criterion="dynamic_inverted_softmax", block_size=block)
        np.testing.assert_array_equal(idx[~gated], nearest[~gated])  # exact: no normaliser involved
        rows = np.flatnonzero(gated)
        assert np.all(crit[rows, idx[rows]] >= crit[rows, want[0][rows]] - 2 * tol)
        np.testing.assert_allclose(score, crit[np.arange(80), idx], rtol=0, atol=tol)
    # k ≥ the database: every row is active, the criterion is inverted_softmax
    assert_same(mn.nearest_neighbours(queries, database, criterion="dynamic_inverted_softmax", k=99),
                mn.nearest_neighbours(queries, database, criterion="inverted_softmax", beta=20.0))


def test_sinkhorn_scalings_within_their_proven_bound():
    queries, database = near_tie_data(50, n=70, m=50)
    cos = mn.cosine_matrix64(queries, database)
    ref = sk.sinkhorn64(cos, 30.0, 8, 0.0)
    for device, rows, cols in (("cpu", 64, 64), ("cpu", 3, 5), (torch.device("cpu"), 7, 11)):
        sc = sk.scalings(context(queries, database, device=device, rows=rows, cols=cols), 30.0, 8, 0.0)
        assert sc.iterations == ref.iterations == 8
        assert np.abs(sc.L - ref.L).max() <= sc.bound + 1e-9
        assert np.abs(sc.g - ref.g).max() <= sc.bound + 1e-9
        assert 2 * 7 * 30.0 * cosine_error_bound(12) < sc.bound < 1e-3  # ≥ β·E32 per half-step, small
    # the tolerance stops early, and the scaled plan's columns are then nearly uniform
    sc = sk.sinkhorn64(cos, 30.0, 500, 1e-6)
    assert sc.iterations < 500 and sc.change <= 1e-6
    plan = np.exp(30.0 * cos + sc.g[:, None] - sc.L[None, :]) / 50  # m·P/m = P
    np.testing.assert_allclose(plan.sum(axis=0), 1 / 50, rtol=0, atol=1e-9)
    np.testing.assert_allclose(plan.sum(axis=1), 1 / 70, rtol=2e-6)


def test_one_sinkhorn_iteration_is_the_inverted_softmax():
    queries, database = near_tie_data(60)
    for block in (None, (5, 7)):
        assert_same(mn.nearest_neighbours(queries, database, criterion="sinkhorn", beta=20.0, iterations=1,
                                          block_size=block),
                    mn.nearest_neighbours(queries, database, criterion="inverted_softmax", beta=20.0,
                                          block_size=block))
    assert_same(mn.nearest_neighbours_reference(queries, database, criterion="sinkhorn", beta=20.0, iterations=1),
                mn.nearest_neighbours_reference(queries, database, criterion="inverted_softmax", beta=20.0))


@pytest.mark.parametrize("seed", range(2))
def test_sinkhorn_matches_brute_force_up_to_its_scalings(seed):
    queries, database = near_tie_data(seed + 70, n=80, m=50)
    cos = mn.cosine_matrix64(queries, database)
    params = {"beta": 30.0, "iterations": 6, "tol": 0.0}
    ref = sk.sinkhorn64(cos, **params)
    want = mn.nearest_neighbours_reference(queries, database, criterion="sinkhorn", **params)
    crit = 30.0 * cos - ref.L[None, :]
    sc = sk.scalings(context(queries, database, rows=3, cols=5), 30.0, 6, 0.0)  # the most blocks: widest
    for block in BLOCKS:
        idx, score = mn.nearest_neighbours(queries, database, criterion="sinkhorn", block_size=block, **params)
        rows = np.arange(80)
        assert np.all(crit[rows, idx] >= crit[rows, want[0]] - 2 * sc.bound)
        np.testing.assert_allclose(score, crit[rows, idx] + ref.g, rtol=0, atol=2 * sc.bound)
        top2 = -np.sort(-crit, axis=1)[:, :2]
        clear = top2[:, 0] - top2[:, 1] > 2 * sc.bound
        assert clear.sum() > 20
        np.testing.assert_array_equal(idx[clear], want[0][clear])


def test_hand_case_dynamic_inverted_softmax():
    # cos by construction (queries × h, a, b, c); beta = 10, k = 1.
    #   q0 .54 .48 .06 .50 | q1 .53 .06 .10 .50 | q2 .52 .12 .10 .50 | q3 .20 .10 .45 .52
    # Nearest rows: q0–q2 → h (shared: normalised), q3 → c (its own alone: not normalised).
    # L = log Σ_q exp(10·cos): h 6.414122, a 4.862684, b 4.577550, c 6.440167.
    # q0: a 4.8 − 4.862684 = −.062684 beats h −1.014122 → a;  q1, q2: h (−1.114122, −1.214122);
    # q3 keeps c (score 5.2 − 6.440167 = −1.240167) although inverted softmax would take
    # b (4.5 − 4.577550 = −.077550).
    cos = np.array([[0.54, 0.48, 0.06, 0.50], [0.53, 0.06, 0.10, 0.50],
                    [0.52, 0.12, 0.10, 0.50], [0.20, 0.10, 0.45, 0.52]])
    queries = np.hstack([cos, np.sqrt(1 - (cos**2).sum(axis=1, keepdims=True))]) * 2
    database = np.eye(5)[:4]
    idx, score = mn.nearest_neighbours(queries, database, criterion="dynamic_inverted_softmax", beta=10)
    assert idx.tolist() == [1, 0, 0, 3]
    np.testing.assert_allclose(score, [-0.062684, -1.114122, -1.214122, -1.240167], atol=2e-5)
    assert mn.nearest_neighbours(queries, database)[0].tolist() == [0, 0, 0, 3]
    assert mn.nearest_neighbours(queries, database, criterion="inverted_softmax", beta=10)[0].tolist() == [1, 0, 0, 2]
    ref = mn.nearest_neighbours_reference(queries, database, criterion="dynamic_inverted_softmax", beta=10)
    assert ref[0].tolist() == [1, 0, 0, 3]  # the scores differ only by the normaliser's rounding


def test_hand_case_sinkhorn():
    # Two queries, two captions, both queries' cosine match is d0: cos = [[.6, .5], [.55, .3]].
    # Sinkhorn converges to P = [[p, 1/2 − p], [1/2 − p, p]] with the kernel's cross ratio:
    # p²/(1/2 − p)² = exp(10·(.6 + .3 − .5 − .55)) = e^−1.5 → p = .160411: q0 → d1, q1 → d0,
    # both scoring log(2·(1/2 − p)) = log(.679179) = −.386871.
    cos = np.array([[0.6, 0.5], [0.55, 0.3]])
    queries = np.hstack([cos, np.sqrt(1 - (cos**2).sum(axis=1, keepdims=True))])
    database = np.eye(3)[:2]
    idx, score = mn.nearest_neighbours(queries, database, criterion="sinkhorn", beta=10, iterations=200, tol=1e-9)
    assert idx.tolist() == [1, 0]
    np.testing.assert_allclose(score, [-0.386871, -0.386871], atol=2e-5)
    assert mn.nearest_neighbours(queries, database)[0].tolist() == [0, 0]
    ref = mn.nearest_neighbours_reference(queries, database, criterion="sinkhorn", beta=10, iterations=200, tol=1e-9)
    assert ref[0].tolist() == [1, 0]
    np.testing.assert_allclose(ref[1], [-0.386871, -0.386871], atol=1e-6)


def test_bad_options_of_the_new_criteria():
    queries, database = hub_inputs()
    with pytest.raises(ValueError, match="iterations must be a positive whole number"):
        mn.nearest_neighbours(queries, database, criterion="sinkhorn", iterations=0)
    with pytest.raises(ValueError, match="tol must be a finite number ≥ 0"):
        mn.nearest_neighbours(queries, database, criterion="sinkhorn", tol=-1.0)
    with pytest.raises(ValueError, match="k must be a positive whole number"):
        mn.nearest_neighbours(queries, database, criterion="dynamic_inverted_softmax", k=0)
    with pytest.raises(ValueError, match="iterations is only used by"):
        mn.nearest_neighbours(queries, database, criterion="inverted_softmax", iterations=3)


def collapsed_data(seed: int, n: int = 80, m: int = 120, dim: int = 24):
    """A barely trained model's embeddings: every row within ~1e-3 of one direction."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(dim)
    rows = (base + 2e-3 * rng.standard_normal((n + m, dim))).astype(np.float32)
    return rows[:n], rows[n:]


@pytest.mark.parametrize("criterion", EXACT)
def test_near_ties_pick_the_float32_path_and_settle_in_bounded_memory(criterion, monkeypatch):
    """A collapsed model puts most database rows within the bf16 window: the sampled probe sends
    the candidate passes to the float32 GEMM, and the window reducers settle their candidates
    exactly as they go (forced here with a tiny ``SETTLE_ENTRIES``) — the same answer as brute force."""
    import pseudopairs.mining.search as search
    import pseudopairs.similarity.reducers as reducers

    queries, database = collapsed_data(3)
    k = {"csls": 3, "margin": 2}.get(criterion)
    want = mn.nearest_neighbours_reference(queries, database, criterion=criterion, k=k)
    monkeypatch.setattr(search, "PROBE_MIN_SCORES", 0)
    monkeypatch.setattr(search, "CROWDED_WINDOW", 20)
    monkeypatch.setattr(reducers, "SETTLE_ENTRIES", 50)
    with bf16_mode(True, kernel="emulated"):
        ctx = context(queries, database)
        assert ctx.crowding > 20 and ctx.path == "float32" and ctx.E == ctx.E32
        spread = context(*near_tie_data(4, n=80, m=120, dim=24))
        assert spread.crowding < 20 and spread.path == "bf16"
        assert_same(mn.nearest_neighbours(queries, database, criterion=criterion, k=k, block_size=(16, 32)), want)
    monkeypatch.setattr(search, "CROWDED_WINDOW", 10_000)  # bf16 kept: settling alone bounds memory
    with bf16_mode(True, kernel="emulated"):
        assert context(queries, database).path == "bf16"
        assert_same(mn.nearest_neighbours(queries, database, criterion=criterion, k=k, block_size=(16, 32)), want)


# ---------------------------------------------------------------------------------------------
# Rows and rescoring on the device (pseudopairs.similarity.device_rows): the same bits as the
# host's, tested on CPU tensors through the code a GPU runs
# ---------------------------------------------------------------------------------------------


def test_device_rows_and_cosines_are_the_hosts_bits():
    from pseudopairs.similarity import cosine64_pairs
    from pseudopairs.similarity.device_rows import DeviceUnitRows, device_cosine_pairs, device_unit_rows

    rng = np.random.default_rng(11)
    for dim in (12, 300, 1024):
        x = (rng.standard_normal((40, dim)) * 10.0 ** rng.integers(-30, 30, size=(40, 1))).astype(np.float32)
        y = rng.standard_normal((25, dim)).astype(np.float32)
        hx, hy = unit_rows(x, name="x"), unit_rows(y, name="y")
        dx = device_unit_rows(x, name="x", device=torch.device("cpu"))
        dy = device_unit_rows(y, name="y", device=torch.device("cpu"))
        assert isinstance(dx, DeviceUnitRows)
        for host, device in ((hx, dx), (hy, dy)):
            np.testing.assert_array_equal(device.shift, host.shift)
            assert device.norm.tobytes() == host.norm.tobytes()
        a, b = rng.integers(0, 40, 500), rng.integers(0, 25, 500)
        assert device_cosine_pairs(dx, dy, a_rows=a, b_rows=b).tobytes() == \
            cosine64_pairs(hx, hy, a_rows=a, b_rows=b).tobytes()
        # a unit block on the device is the torch path's block from host rows
        torch.testing.assert_close(dx.unit_block(3, 17), mn.search.UnitRowSource(hx, torch.device("cpu")).block(3, 17),
                                   rtol=0, atol=0)
    bad = np.ones((4, 3), dtype=np.float32)
    bad[2] = 0
    with pytest.raises(ValueError, match="x: row 2 is all zeros"):
        device_unit_rows(bad, name="x", device=torch.device("cpu"))
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="x: row 1 contains NaN or infinite values"):
        device_unit_rows(bad, name="x", device=torch.device("cpu"))


@pytest.mark.parametrize("criterion", EXACT + ("inverted_softmax", "dynamic_inverted_softmax"))
def test_every_criterion_on_device_rows_gives_the_host_rows_bits(criterion):
    """The exact criteria give the host engine's (numpy) bits; those with a float32-accumulated
    normaliser (exact for that normaliser) give the torch path's bits on host rows (the normaliser
    comes from the same float32 unit rows)."""
    from pseudopairs.mining.search import _inputs
    from pseudopairs.similarity.device_rows import DeviceUnitRows

    for seed in range(2):
        queries, database = near_tie_data(seed)
        params = criteria.check_params(criterion, {"k": {"csls": 3, "margin": 2}[criterion]}
                                       if criterion in ("csls", "margin") else {})
        q, d = _inputs(queries, database, 1, torch.device("cpu"))
        assert isinstance(q, DeviceUnitRows) and isinstance(d, DeviceUnitRows)
        results = {}
        with bf16_mode(False):
            for name, (qq, dd) in (("device", (q, d)), ("host", (unit_rows(queries, name="q"), unit_rows(database, name="d")))):
                ctx = SearchContext(q=qq, d=dd, device=torch.device("cpu"), rows=7, cols=11, progress=False, threads=1)
                assert ctx.on_device == (name == "device")
                idx, score = criteria.get(criterion).search(ctx, params)
                results[name] = (np.asarray(idx, dtype=np.int64), np.asarray(score, dtype=np.float32))
        assert_same(results["device"], results["host"])
        if criterion in EXACT:
            assert_same(results["device"], mn.nearest_neighbours(queries, database, criterion=criterion, **params))
    # float64 rows keep the host path
    q, _ = _inputs(queries.astype(np.float64), database, 1, torch.device("cpu"))
    assert not isinstance(q, DeviceUnitRows)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_mining_gives_the_host_engines_bits():
    """On a GPU: rows, rescoring and the float64 sums on the device give the CPU engine's bits."""
    for seed in range(2):
        queries, database = near_tie_data(seed, n=300, m=200, dim=1024)
        for criterion, params in (("cosine", {}), ("mutual", {}), ("csls", {"k": 3}), ("margin", {"k": 2})):
            assert_same(mn.nearest_neighbours(queries, database, criterion=criterion, device="cuda", **params),
                        mn.nearest_neighbours(queries, database, criterion=criterion, **params))
