"""Tests for pseudopairs.mining.statistics: hand-computed diagnostics of database use."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pseudopairs.mining import statistics as hb

# Four database rows picked 3, 1, 0, 0 times (n = 4, μ = 1, C = 4):
#   deviations 2, 0, −1, −1 → m2 = 6/4 = 1.5, m3 = (8 − 1 − 1)/4 = 1.5 → skewness 1.5/1.5**1.5
#   Σ_i Σ_j |c_i − c_j| = 2·(2 + 3 + 3 + 1 + 1 + 0) = 20 → Gini 20/(2·16·1) = 0.625
#   Robin Hood: Σ|c − μ| = 4 → 4/(2·4) = 0.5 (two of the four picks must move)
PICKS = np.array([0, 1, 0, 0, -1])  # -1: a query without a match (mutual)
COUNTS = [3, 1, 0, 0]


def test_k_occurrence():
    assert hb.k_occurrence(PICKS, n_database=4).tolist() == COUNTS
    assert hb.k_occurrence(np.array([], dtype=np.int64), n_database=2).tolist() == [0, 0]
    with pytest.raises(ValueError, match="row 4 is outside the 4 database rows"):
        hb.k_occurrence([0, 4], n_database=4)
    with pytest.raises(ValueError, match="integer"):
        hb.k_occurrence([0.5], n_database=4)
    with pytest.raises(ValueError, match="1-D"):
        hb.k_occurrence([[0]], n_database=4)
    with pytest.raises(ValueError, match="n_database"):
        hb.k_occurrence([0], n_database=0)


def test_hand_computed_statistics():
    assert hb.skewness(COUNTS) == pytest.approx(1.5 / 1.5**1.5)
    assert hb.gini(COUNTS) == pytest.approx(0.625)
    assert hb.robin_hood(COUNTS) == pytest.approx(0.5)
    assert hb.unused_share(COUNTS) == 0.5
    assert hb.used_share(COUNTS) == 0.5
    assert hb.top_share(COUNTS, top=1) == 0.75
    assert hb.top_share(COUNTS, top=2) == 1.0
    assert hb.top_share(COUNTS) == 1.0  # top 150 of 4 rows: everything
    summary = hb.usage_summary(PICKS, n_database=4, top=1)
    assert list(summary) == list(hb.USAGE_KEYS)
    assert summary == {"used_share": 0.5, "unused_share": 0.5, "top_share": 0.75,
                       "skewness": pytest.approx(0.8164966), "gini": 0.625, "robin_hood": 0.5}


def test_gini_matches_the_pairwise_definition():
    rng = np.random.default_rng(0)
    c = rng.integers(0, 20, 37)
    pairwise = np.abs(c[:, None] - c[None, :]).sum() / (2 * c.size**2 * c.mean())
    assert hb.gini(c) == pytest.approx(pairwise)
    assert hb.gini([5, 5, 5]) == 0.0
    assert hb.gini([0, 0, 9]) == pytest.approx(2 / 3)  # one row takes everything: (n−1)/n
    assert hb.robin_hood([0, 0, 9]) == pytest.approx(2 / 3)  # 6 of the 9 picks must move


def test_degenerate_cases():
    assert math.isnan(hb.skewness([2, 2, 2]))  # σ = 0
    assert math.isnan(hb.gini([0, 0]))
    assert math.isnan(hb.robin_hood([0, 0]))
    assert math.isnan(hb.top_share([0, 0]))
    with pytest.raises(ValueError, match="non-empty"):
        hb.gini([])
    with pytest.raises(ValueError, match="non-negative"):
        hb.robin_hood([1, -1])
    with pytest.raises(ValueError, match="top"):
        hb.top_share([1], top=0)


def test_used_share_unique_counts_texts():
    texts = ["ein hund", "eine katze", "ein hund", "ein haus"]
    # rows 0 and 2 carry the same text: picking row 2 uses "ein hund"; 2 of 3 texts used
    assert hb.used_share_unique([2, 1, -1], database_texts=texts) == pytest.approx(2 / 3)
    assert hb.used_share_unique([0, 2], database_texts=texts) == pytest.approx(1 / 3)
    assert hb.used_share([1, 1, 0, 0]) == 0.5  # by row, for comparison


def test_jaccard():
    assert hb.jaccard({1, 2, 3}, [2, 3, 4]) == 0.5
    assert hb.jaccard([1, 1, 2], [2]) == 0.5  # as sets
    assert hb.jaccard([], [5]) == 0.0
    assert math.isnan(hb.jaccard([], []))
