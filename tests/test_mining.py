"""Tests for pseudopairs.mining.nearest_neighbours: every criterion against a brute-force float64
evaluation of the same definition (random data, near-ties, duplicates, blocks smaller than the
data), hand-computed cases where a hubness-aware criterion changes the cosine argmax, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pseudopairs import mining as mn
from pseudopairs.mining import criteria
from pseudopairs.mining.criteria.inverted_softmax import log_sum_exp_columns64
from pseudopairs.mining.search import SearchContext
from pseudopairs.similarity import cosine_error_bound, unit_rows

torch.set_num_threads(1)
EXACT = ("cosine", "mutual", "csls", "margin")
BLOCKS = (None, 3, (5, 7), (64, 9))


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
