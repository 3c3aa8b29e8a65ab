"""Tests for pseudopairs.similarity: exact float64 scores, error bounds, blocks and reducers
(numpy, and the torch code on CPU tensors), each against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pseudopairs import similarity as sim
from pseudopairs.similarity.reducers import _np

torch.set_num_threads(1)
BACKENDS = ["cpu", torch.device("cpu")]  # numpy, and the torch code the CUDA path runs


def unit(rng, n, d, dtype=np.float32):
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


def full_cos(q: sim.UnitRows, d: sim.UnitRows) -> np.ndarray:
    qi, dj = np.meshgrid(np.arange(q.n), np.arange(d.n), indexing="ij")
    return sim.cosine64_pairs(q, d, a_rows=qi.ravel(), b_rows=dj.ravel()).reshape(q.n, d.n)


# ---------------------------------------------------------------------------------------------
# Exact scores
# ---------------------------------------------------------------------------------------------


def test_dot64_is_positional_independent_and_accurate():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 257)).astype(np.float32)
    y = rng.standard_normal((30, 257)).astype(np.float32)
    rows = rng.integers(0, 40, 500)
    cols = rng.integers(0, 30, 500)
    batch = sim.dot64_pairs(x, y, x_rows=rows, y_rows=cols, threads=3)
    # The same pair alone, in another batch, or from a shifted copy of the data gives the same bits.
    for i in (0, 17, 499):
        alone = sim.dot64_pairs(x, y, x_rows=rows[i:i + 1], y_rows=cols[i:i + 1])
        assert alone[0] == batch[i]
    shifted = np.zeros((41, 257), dtype=np.float32)
    shifted[1:] = x
    again = sim.dot64_pairs(shifted[1:], y, x_rows=rows[::-1], y_rows=cols[::-1])
    np.testing.assert_array_equal(again[::-1], batch)
    # Products of float32 values are exact in float64: only the summation rounds.
    exact = np.array([math.fsum((x[r].astype(np.float64) * y[c].astype(np.float64)).tolist())
                      for r, c in zip(rows, cols)])
    bound = sim.dot64_relative_error(257) * np.abs(x[rows].astype(np.float64) * y[cols]).sum(axis=1)
    assert np.all(np.abs(batch - exact) <= bound)
    with pytest.raises(ValueError, match="equal length"):
        sim.dot64_pairs(x, y, x_rows=rows, y_rows=cols[:3])


def test_unit_rows_and_cosine_definition():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 9))
    x[2] *= 1e200  # would overflow a plain sum of squares
    x[3] = x[0] * 2.0**-60  # same direction as row 0, power-of-two scale: identical cosines
    rows = sim.unit_rows(x, name="x")
    assert np.all((np.abs(np.ldexp(x, -rows.shift[:, None])).max(axis=1) >= 1)
                  & (np.abs(np.ldexp(x, -rows.shift[:, None])).max(axis=1) < 2))
    cos = full_cos(rows, rows)
    assert np.isfinite(cos).all()
    np.testing.assert_array_equal(cos[0], cos[3])
    np.testing.assert_array_equal(cos, cos.T)  # symmetric by construction
    scaled = x / np.abs(x).max(axis=1, keepdims=True)
    ref = scaled / np.linalg.norm(scaled, axis=1, keepdims=True)
    np.testing.assert_allclose(cos, ref @ ref.T, rtol=0, atol=1e-14)
    # float32 rows: shifting after the product gives the very same bits as shifting before.
    x32 = (rng.standard_normal((5, 33)) * np.array([[1e-30], [1], [1e30], [3], [1e-5]])).astype(np.float32)
    r32 = sim.unit_rows(x32, name="x32")
    r64 = sim.unit_rows(x32.astype(np.float64), name="x64")
    np.testing.assert_array_equal(full_cos(r32, r32), full_cos(r64, r64))
    block = sim.unit_block32(r32, 0, 5)
    assert block.dtype == np.float32 and np.allclose(np.linalg.norm(block, axis=1), 1, atol=1e-6)


@pytest.mark.parametrize("bad,message", [
    (np.zeros((3,)), "queries: expected a 2-D"),
    (np.zeros((0, 3)), "queries: no rows"),
    (np.zeros((3, 0)), "queries: rows have no dimensions"),
    (np.array([[1.0, 2.0], [0.0, 0.0]]), "queries: row 1 is all zeros"),
    (np.array([[1.0, np.nan], [1.0, 0.0]]), "queries: row 0 contains NaN"),
    (np.array([[1.0, 2.0], [np.inf, 0.0]]), "queries: row 1 contains NaN or infinite"),
    (np.array([["a", "b"]]), "queries: expected real numbers"),
    (np.array([[1 + 2j, 0]]), "queries: expected real numbers"),
])
def test_unit_rows_rejects_bad_input(bad, message):
    with pytest.raises(ValueError, match=message):
        sim.unit_rows(bad, name="queries")


def test_duplicate_groups():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((9, 5)).astype(np.float32)
    x[6] = x[2]
    x[8] = x[2]
    x[4] = x[1]
    x[5] = x[3].copy()
    x[5, 0] = np.nextafter(x[5, 0], np.float32(np.inf))  # one ulp away: not a duplicate
    assert sim.duplicate_groups(x).tolist() == [0, 1, 2, 3, 1, 5, 2, 7, 2]
    x[7] = x[0] * 8  # same direction: a duplicate once rows are shifted to max |x| in [1, 2)
    rows = sim.unit_rows(x, name="x")
    assert sim.duplicate_groups(x, shift=rows.shift).tolist() == [0, 1, 2, 3, 1, 5, 2, 0, 2]
    assert sim.duplicate_groups(x)[7] == 7


# ---------------------------------------------------------------------------------------------
# Error bounds
# ---------------------------------------------------------------------------------------------


def test_error_bounds_hold_and_scale():
    assert sim.gamma(10, 0.01) == pytest.approx(0.1 / 0.9)
    with pytest.raises(ValueError):
        sim.gamma(10**9, sim.U32)
    e = sim.gemm_relative_error(1024)
    assert 1024 * sim.U32 < e < 1.01 * 1026 * sim.U32  # γ_1024 plus two input roundings
    assert sim.gemm_relative_error(1024, input_unit=sim.TF32_UNIT) > 2 * sim.TF32_UNIT
    assert sim.matmul_input_unit("cpu") == 0.0
    assert sim.matmul_input_unit(torch.device("cpu")) == 0.0  # torch default: "highest" precision
    rng = np.random.default_rng(3)
    for dim in (3, 64, 700):
        q = sim.unit_rows(rng.standard_normal((50, dim)), name="q")
        d = sim.unit_rows(rng.standard_normal((60, dim)), name="d")
        s32 = sim.unit_block32(q, 0, 50) @ sim.unit_block32(d, 0, 60).T
        err = np.abs(s32.astype(np.float64) - full_cos(q, d)).max()
        assert err <= sim.cosine_error_bound(dim)
        assert sim.cosine_error_bound(dim) < 4 * dim * sim.U32


# ---------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------


def test_block_shape():
    assert sim.block_shape(10, 20) == (10, 20)
    assert sim.block_shape(10_000, 100_000) == (2048, sim.DEFAULT_BLOCK_ELEMENTS // 2048)
    assert sim.block_shape(100, 50, rows=7, cols=9) == (7, 9)
    assert sim.block_shape(100, 50, cols=50, budget=1000) == (20, 50)
    assert sim.block_shape(5, 5, rows=99, cols=99) == (5, 5)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive whole"):
            sim.block_shape(5, 5, rows=bad)


@pytest.mark.parametrize("backend", BACKENDS, ids=["numpy", "torch"])
def test_blocks_tile_the_score_matrix(backend):
    rng = np.random.default_rng(4)
    q, d = unit(rng, 23, 8), unit(rng, 70, 8)
    on_torch = sim.uses_torch(backend)
    db = torch.from_numpy(d) if on_torch else d
    seen = np.zeros((23, 70), dtype=int)
    for block in sim.iter_blocks(sim.DenseRows(torch.from_numpy(q) if on_torch else q), db, rows=5, cols=30):
        scores = _np(block.scores)
        assert scores.shape[0] % sim.CHUNK == 0 and scores.shape[1] % sim.CHUNK == 0
        b, c = block.n_rows, block.n_cols
        np.testing.assert_allclose(scores[:b, :c], q[block.row0:block.row1] @ d[block.col0:block.col1].T,
                                   rtol=0, atol=1e-6)
        outside = np.ones(scores.shape, dtype=bool)
        outside[:b, :c] = False
        assert np.all(scores[outside] == -np.inf)  # padding never holds stale scores
        seen[block.row0:block.row1, block.col0:block.col1] += 1
    assert np.all(seen == 1)


# ---------------------------------------------------------------------------------------------
# Reducers
# ---------------------------------------------------------------------------------------------


def brute_window(scores: np.ndarray, k: int, window: float):
    """{(line, other)} with score ≥ (k-th largest of the line) − window, per row."""
    kth = -np.sort(-scores, axis=1)[:, k - 1]
    r, c = np.nonzero(scores >= (kth - window)[:, None])
    return set(zip(r.tolist(), c.tolist()))


@pytest.mark.parametrize("backend", BACKENDS, ids=["numpy", "torch"])
@pytest.mark.parametrize("k,window", [(1, 0.0), (1, 0.05), (3, 0.0), (4, 0.02)])
def test_window_topk_keeps_exactly_the_window(backend, k, window):
    rng = np.random.default_rng(5 + k)
    # Values on a coarse grid: many exact ties, and windows that land exactly on values.
    q = np.round(unit(rng, 150, 6) * 8) / 8
    d = np.round(unit(rng, 130, 6) * 8) / 8
    scores = (q.astype(np.float64) @ d.T.astype(np.float64)).astype(np.float32)
    on_torch = sim.uses_torch(backend)
    qs = torch.from_numpy(q) if on_torch else q
    db = torch.from_numpy(d) if on_torch else d
    for rows, cols in ((150, 130), (17, 40), (64, 7), (3, 130)):
        by_row = sim.WindowTopK(axis="rows", n_lines=150, k=k, window=window)
        by_col = sim.WindowTopK(axis="cols", n_lines=130, k=k, window=window)
        sim.run_pass(sim.DenseRows(qs), db, [by_row, by_col], rows=rows, cols=cols)
        got = by_row.result()
        assert set(zip(got.line.tolist(), got.other.tolist())) == brute_window(scores, k, window)
        np.testing.assert_array_equal(got.value, scores[got.line, got.other])
        got = by_col.result()
        assert set(zip(got.other.tolist(), got.line.tolist())) == {
            (r, c) for c, r in brute_window(scores.T, k, window)}
        # grouped by line, decreasing values within a line
        assert np.all(np.diff(got.line) >= 0)
        same = np.diff(got.line) == 0
        assert np.all(np.diff(got.value)[same] <= 0)


@pytest.mark.parametrize("backend", BACKENDS, ids=["numpy", "torch"])
def test_column_log_sum_exp_within_its_bound(backend):
    rng = np.random.default_rng(6)
    q = sim.unit_rows(rng.standard_normal((300, 32)), name="q")
    d = sim.unit_rows(rng.standard_normal((90, 32)), name="d")
    cos = full_cos(q, d)
    beta = 30.0
    exact = beta * cos.max(axis=0) + np.log(np.exp(beta * (cos - cos.max(axis=0))).sum(axis=0))
    for rows, cols in ((300, 90), (70, 33)):
        lse = sim.ColumnLogSumExp(n_cols=90, beta=beta)
        sim.run_pass(sim.UnitRowSource(q, backend), sim.database32(d, backend), [lse], rows=rows, cols=cols)
        bound = lse.error_bound(score_error=sim.cosine_error_bound(32))
        assert np.abs(lse.result() - exact).max() <= bound
        assert bound < beta * 1e-5
    with pytest.raises(ValueError, match="beta"):
        sim.ColumnLogSumExp(n_cols=3, beta=0.0)


def test_mask_counts():
    rng = np.random.default_rng(7)
    m = rng.random((255, 64)) < 0.4
    np.testing.assert_array_equal(sim.count_true_rows(m), m.sum(axis=1))
    np.testing.assert_array_equal(sim.count_true_cols(m), m.sum(axis=0))
    m[:] = True  # 255 per column: the largest a byte lane may hold
    np.testing.assert_array_equal(sim.count_true_cols(m), np.full(64, 255))
    wide = np.ones((3, 8 * 3136), dtype=bool)  # rows summed in groups of 196 words
    wide[1, ::3] = False
    np.testing.assert_array_equal(sim.count_true_rows(wide), wide.sum(axis=1))


@pytest.mark.parametrize("backend", BACKENDS, ids=["numpy", "torch"])
def test_threshold_counter_against_brute_force(backend):
    rng = np.random.default_rng(8)
    x = np.round(rng.standard_normal((40, 4)) * 2) / 2  # grid values: exact scores, many ties
    y = np.round(rng.standard_normal((75, 4)) * 2) / 2
    scores = (x @ y.T).astype(np.float32)
    expected_col = rng.integers(0, 40, 75)
    col_t = scores[expected_col, np.arange(75)]
    col_lo, col_hi = col_t - 0.25, col_t + 0.25
    expected_row = rng.integers(0, 75, 40)
    row_t = scores[np.arange(40), expected_row]
    row_lo, row_hi = row_t - 0.5, row_t
    on_torch = sim.uses_torch(backend)
    xs = torch.from_numpy(x.astype(np.float32)) if on_torch else x.astype(np.float32)
    ys = torch.from_numpy(y.astype(np.float32)) if on_torch else y.astype(np.float32)
    counter = sim.ThresholdCounter(n_rows=40, n_cols=75, rows=True, col_lo=col_lo, col_hi=col_hi,
                                   row_expected=np.ones(40, dtype=np.int64), col_expected_row=expected_col)
    for block in sim.iter_blocks(sim.DenseRows(xs), ys, rows=9, cols=75):
        counter.update(block, row_lo=row_lo[block.row0:block.row1], row_hi=row_hi[block.row0:block.row1])
    np.testing.assert_array_equal(counter.row_above, (scores > row_hi[:, None]).sum(axis=1))
    np.testing.assert_array_equal(counter.col_above, (scores > col_hi[None, :]).sum(axis=0))
    rows_und, cols_und = counter.undecided()
    inside_r = (scores >= row_lo[:, None]) & (scores <= row_hi[:, None])
    many = inside_r.sum(axis=1) > 1  # rows with more than the expected entry in the window
    want = {(r, c) for r, c in zip(*np.nonzero(inside_r)) if many[r]}
    assert set(zip(rows_und.row.tolist(), rows_und.col.tolist())) == want
    inside_c = (scores >= col_lo[None, :]) & (scores <= col_hi[None, :])
    # per block of rows: a column is reported where the block holds more window entries than the
    # expected one (if that row is in the block)
    want = set()
    for r0 in range(0, 40, 9):
        part = inside_c[r0:r0 + 9]
        expected = ((expected_col >= r0) & (expected_col < r0 + 9)).astype(int)
        for c in np.flatnonzero(part.sum(axis=0) > expected):
            want |= {(r0 + r, c) for r in np.flatnonzero(part[:, c])}
    assert set(zip(cols_und.row.tolist(), cols_und.col.tolist())) == want
    assert len(want) > 0 and many.any()  # the case exercises both kinds of undecided entries


def test_threshold_counter_detects_a_violated_window():
    scores = np.array([[0.5, 0.9]], dtype=np.float32)
    counter = sim.ThresholdCounter(n_rows=1, n_cols=2, rows=True, row_expected=np.ones(1, dtype=np.int64))
    block = next(sim.iter_blocks(sim.DenseRows(np.eye(1, dtype=np.float32)), scores.T.copy(), rows=1, cols=2))
    with pytest.raises(RuntimeError, match="error window"):
        # the expected entry (0.5) lies outside [0.6, 0.7]: the bound would be wrong
        counter.update(block, row_lo=np.array([0.6], np.float32), row_hi=np.array([0.7], np.float32))
    with pytest.raises(ValueError, match="whole rows"):
        counter.update(block._replace(col1=1), row_lo=np.zeros(1), row_hi=np.zeros(1))


# ---------------------------------------------------------------------------------------------
# The bf16 candidate GEMM (lowp)
# ---------------------------------------------------------------------------------------------


def test_bf16_rounding_and_measured_errors():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((50, 33)).astype(np.float32)
    x[0, :4] = [1.0, -0.0, 1e-42, -3e-39]  # exact, signed zero, subnormals
    xb, err = sim.rounded_with_errors(x)
    assert xb.dtype == torch.bfloat16
    assert torch.equal(xb.view(torch.int16), torch.from_numpy(x).to(torch.bfloat16).view(torch.int16))  # RNE
    exact = np.linalg.norm(xb.double().numpy() - x.astype(np.float64), axis=1)
    assert np.all(err >= exact) and np.all(err <= exact * (1 + 1e-5) + 1e-18)
    assert np.all(exact <= 2.0**-8 * np.linalg.norm(x.astype(np.float64), axis=1))  # a-priori bound
    t = torch.from_numpy(x)
    assert torch.equal(sim.to_bf16(t), xb) and torch.equal(sim.to_bf16(x), xb)


@pytest.mark.parametrize("kernel", sim.KERNELS)
def test_bf16_gemm_within_its_proven_bound(kernel):
    rng = np.random.default_rng(10)
    for dim in (3, 64, 700):
        q = sim.unit_rows(rng.standard_normal((50, dim)), name="q")
        d = sim.unit_rows(rng.standard_normal((70, dim)), name="d")
        q16, q_err = sim.rounded_with_errors(sim.unit_block32(q, 0, 50))
        d16 = sim.database_bf16(d)
        out = np.full((64, 128), -np.inf, dtype=np.float32)
        sim.gemm_bf16(q16, d16.data, out[:50, :70], kernel=kernel)
        assert np.all(out[50:] == -np.inf) and np.all(out[:, 70:] == -np.inf)  # writes its view only
        out_unit = sim.BF16_UNIT if kernel == "onednn" else 0.0
        bound = sim.bf16_cosine_error_bound(dim, float(q_err.max()), d16.err_max, out_unit=out_unit)
        err = np.abs(out[:50, :70].astype(np.float64) - full_cos(q, d))
        assert err.max() <= bound
        assert err.max() > sim.cosine_error_bound(dim)  # bf16 really is coarser than float32
        assert bound < (4 if out_unit else 2) * 2.0**-8 * 1.1  # and the bound is not vacuous
        torch_out = torch.empty((50, 70))
        sim.gemm_bf16(q16, d16.data, torch_out, kernel=kernel)
        assert np.abs(torch_out.numpy().astype(np.float64) - full_cos(q, d)).max() <= bound


def test_bf16_dispatch_can_be_forced(monkeypatch):
    with sim.bf16_mode(True, kernel="mkl"):
        assert sim.bf16_enabled("cpu") and sim.bf16_enabled(torch.device("cpu"))
        assert sim.output_unit("cpu") == 0.0
        assert sim.cpu_kernel() in ("mkl", "emulated")  # emulated where torch has no MKL
    with sim.bf16_mode(True, kernel="onednn"):
        assert sim.output_unit("cpu") == sim.BF16_UNIT
    with sim.bf16_mode(False):
        assert not sim.bf16_enabled("cpu")
    monkeypatch.setenv("PSEUDOPAIRS_BF16", "0")
    assert not sim.bf16_enabled("cpu")
    monkeypatch.setenv("PSEUDOPAIRS_BF16", "1")
    assert sim.bf16_enabled("cpu")
    with sim.bf16_mode(False):  # the context manager wins over the environment
        assert not sim.bf16_enabled("cpu")
    with pytest.raises(ValueError, match="kernel must be one of"):
        with sim.bf16_mode(True, kernel="fp8"):
            pass
    assert sim.accumulation_unit("cpu") == sim.U32


@pytest.mark.parametrize("backend", BACKENDS, ids=["numpy", "torch"])
def test_bf16_blocks_tile_the_score_matrix_and_keep_the_argmax(backend):
    rng = np.random.default_rng(11)
    q, d = sim.unit_rows(unit(rng, 23, 40), name="q"), sim.unit_rows(unit(rng, 70, 40), name="d")
    cos = full_cos(q, d)
    with sim.bf16_mode(True, kernel="onednn"):
        db = sim.database_bf16(d, backend)
        q_err = max(sim.rounded_with_errors(sim.unit_block32(q, 0, 23))[1])
        bound = sim.bf16_cosine_error_bound(40, q_err, db.err_max, out_unit=sim.BF16_UNIT)
        seen = np.zeros((23, 70), dtype=int)
        best = sim.WindowTopK(axis="rows", n_lines=23, k=1, window=2 * bound)
        for block in sim.iter_blocks(sim.UnitRowSource(q, backend), db, rows=5, cols=30):
            best.update(block)
            scores = _np(block.scores)
            b, c = block.n_rows, block.n_cols
            assert np.abs(scores[:b, :c] - cos[block.row0:block.row1, block.col0:block.col1]).max() <= bound
            outside = np.ones(scores.shape, dtype=bool)
            outside[:b, :c] = False
            assert np.all(scores[outside] == -np.inf)
            seen[block.row0:block.row1, block.col0:block.col1] += 1
        assert np.all(seen == 1)
        got = best.result()
        assert set(zip(range(23), cos.argmax(axis=1).tolist())) <= set(zip(got.line.tolist(), got.other.tolist()))


def test_window_topk_stops_naming_the_collapse_when_scores_nearly_tie():
    """A collapsed model (every embedding almost the same) puts every database row within the
    exact engine's window; the reducer stops with the cause instead of growing without limit
    (the rehearsal's mining job reached 23.5 GB so). A spread model stays far under the limit."""
    rng = np.random.default_rng(11)
    base = unit(rng, 1, 16)
    collapsed = base + 1e-9 * rng.standard_normal((200, 16)).astype(np.float32)
    collapsed /= np.linalg.norm(collapsed, axis=1, keepdims=True)
    q, d = sim.DenseRows(collapsed[:100]), collapsed[100:]
    by_row = sim.WindowTopK(axis="rows", n_lines=100, k=1, window=1e-5, max_entries=5_000)
    with pytest.raises(ValueError, match=r"candidates within the error window .* per row on average\) "
                                         r"exceed the limit of 5,000 .* a collapsed model"):
        sim.run_pass(q, d, [by_row], rows=64, cols=100)
    spread = sim.WindowTopK(axis="rows", n_lines=100, k=1, window=1e-5, max_entries=5_000)
    sim.run_pass(sim.DenseRows(unit(rng, 100, 16)), unit(rng, 100, 16), [spread], rows=64, cols=100)
    assert spread.result().line.size < 200


@pytest.mark.parametrize("axis,k", [("rows", 1), ("rows", 3), ("cols", 1), ("cols", 2)])
def test_window_topk_settles_near_ties_in_bounded_memory(axis, k):
    """With an exact rescoring function the reducer keeps at most ``settle_at`` entries plus one
    block's, however close the scores are, and still returns every line's exact top k: the
    collapsed case that stopped the rehearsal's mining job now finishes."""
    rng = np.random.default_rng(12)
    base = unit(rng, 1, 16)
    rows = base + 1e-4 * rng.standard_normal((300, 16)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    q, d = rows[:120], rows[120:]
    exact = q.astype(np.float64) @ d.T.astype(np.float64)  # the "exact" values of this case
    n_lines = 120 if axis == "rows" else 180

    def exact_of(lines, others):
        return exact[lines, others] if axis == "rows" else exact[others, lines]

    reducer = sim.WindowTopK(axis=axis, n_lines=n_lines, k=k, window=1.0, max_entries=4_000,
                             exact_of=exact_of, settle_at=600)
    sim.run_pass(sim.DenseRows(q), d, [reducer], rows=32, cols=64)  # window 1.0: every entry a candidate
    assert reducer.settled > 0
    assert reducer.peak_entries <= 3 * 600 + 32 * 64 + k * n_lines
    got = reducer.result()
    values = exact if axis == "rows" else exact.T
    want = np.argsort(-values, axis=1, kind="stable")[:, :k]
    order = np.lexsort((got.other, -exact_of(got.line, got.other), got.line))
    line, other = got.line[order], got.other[order]
    starts = np.flatnonzero(np.r_[True, line[1:] != line[:-1]])
    assert np.array_equal(line[starts], np.arange(n_lines))
    np.testing.assert_array_equal(other[starts[:, None] + np.arange(k)], want)
    unsettled = sim.WindowTopK(axis=axis, n_lines=n_lines, k=k, window=1.0, max_entries=4_000)
    with pytest.raises(ValueError, match="a collapsed model"):  # the guard without rescoring
        sim.run_pass(sim.DenseRows(q), d, [unsettled], rows=32, cols=64)
