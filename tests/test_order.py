"""The ``order`` similarity (paper 001; Vendrov et al. 2016): its registry entry, the loss on a hand
case, the model's non-negative embeddings and checkpoint, and exact ranks against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pseudopairs import evaluation as ev
from pseudopairs.model import RankingModel, contrastive_loss
from pseudopairs.similarity import order as O
from pseudopairs.similarity.functions import SIMILARITIES, caption_similarity

torch.set_num_threads(1)

# Hand case: images v and captions c in 2-D; s[i, j] = −‖max(0, c_j − v_i)‖².
V_HAND = [[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]]
C_HAND = [[0.4, 0.6], [0.9, 0.1], [0.3, 0.3]]
# By hand: row 0: c0 − v0 = (−.1, .1) → .01; c1 − v0 = (.4, −.4) → .16; c2 − v0 ≤ 0 → 0
#          row 1: (−.6, .6) → .36; (−.1, .1) → .01; (−.7, .3) → .09
#          row 2: (.4, −.4) → .16; (.9, −.9) → .81; (.3, −.7) → .09
S_HAND = -np.array([[0.01, 0.16, 0.0], [0.36, 0.01, 0.09], [0.16, 0.81, 0.09]])
# margin 0.05; image i against wrong caption j: m − s_ii + s_ij > 0 only for (0, 2): .06.
# caption i against wrong image j: m − s_ii + s_ji > 0 only for caption 2: image 0 .14, image 1 .05.
# max violation: .06 + .14 = .20; sum over negatives: .06 + .14 + .05 = .25.


def test_order_is_registered_with_its_definition():
    order = SIMILARITIES.get("order")
    assert order.nonnegative and order.margin == 0.05
    assert caption_similarity("order") == "cosine" and caption_similarity("cosine") == "cosine"
    assert "max(0, c − v)" in order.definition
    np.testing.assert_allclose(order.reference(np.array(V_HAND), np.array(C_HAND)), S_HAND, atol=1e-15)
    got = order.scores(torch.tensor(V_HAND, dtype=torch.float64), torch.tensor(C_HAND, dtype=torch.float64))
    np.testing.assert_allclose(got.numpy(), S_HAND, atol=1e-15)


def test_order_loss_by_hand():
    v, c = torch.tensor(V_HAND, dtype=torch.float64), torch.tensor(C_HAND, dtype=torch.float64)
    hard = contrastive_loss(v, c, margin=0.05, similarity="order")
    assert float(hard) == pytest.approx(0.20, abs=1e-12)
    total = contrastive_loss(v, c, margin=0.05, max_violation=False, similarity="order")
    assert float(total) == pytest.approx(0.25, abs=1e-12)
    # asymmetric: images and captions swapped is another loss
    assert float(contrastive_loss(c, v, margin=0.05, similarity="order")) != pytest.approx(0.20)


def _loop_order_loss(v, c, margin, max_violation):
    """The VSE++ hinge written out with the order violation, one pair at a time."""
    def s(i, j):  # image i, caption j
        return -sum(max(0.0, c[j][k] - v[i][k]) ** 2 for k in range(len(v[i])))

    n, total = len(v), 0.0
    for i in range(n):
        cost_b = [max(0.0, margin - s(i, i) + s(i, j)) for j in range(n) if j != i]
        cost_a = [max(0.0, margin - s(i, i) + s(j, i)) for j in range(n) if j != i]
        total += (max(cost_b) + max(cost_a)) if max_violation else (sum(cost_b) + sum(cost_a))
    return total


@pytest.mark.parametrize("max_violation", [True, False])
def test_order_loss_matches_a_loop_on_random_data(max_violation):
    rng = np.random.default_rng(3)
    v = np.abs(rng.standard_normal((7, 5)))
    c = np.abs(rng.standard_normal((7, 5)))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    got = contrastive_loss(torch.from_numpy(v), torch.from_numpy(c), margin=0.05,
                           max_violation=max_violation, similarity="order")
    assert float(got) == pytest.approx(_loop_order_loss(v.tolist(), c.tolist(), 0.05, max_violation), rel=1e-12)


def test_order_model_embeddings_are_non_negative_unit_rows_and_kept_in_the_checkpoint(tmp_path):
    from pseudopairs.model.checkpoints import CHECKPOINT_FORMAT, load_model

    torch.manual_seed(0)
    model = RankingModel(20, embedding_dim=6, joint_dim=8, image_dim=10, similarity="order")
    images = model.encode_images(torch.randn(5, 10))
    captions = model.encode_captions(torch.randint(1, 20, (4, 3)), torch.tensor([3, 2, 1, 3]))
    for x in (images, captions):
        assert (x >= 0).all() and torch.allclose(x.norm(dim=1), torch.ones(len(x)), atol=1e-6)
    assert model.config()["similarity"] == "order"
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": CHECKPOINT_FORMAT, "model_state": model.state_dict(), **model.config()}, path)
    loaded, meta = load_model(path)
    assert loaded.similarity == "order" and meta["similarity"] == "order"
    old = {k: v for k, v in model.config().items() if k != "similarity"}  # a checkpoint from before
    torch.save({"format": CHECKPOINT_FORMAT, "model_state": model.state_dict(), **old}, path)
    assert load_model(path)[0].similarity == "cosine"
    with pytest.raises(ValueError, match="similarity must be one of"):
        RankingModel(20, embedding_dim=6, joint_dim=8, image_dim=10, similarity="euclid")


# --------------------------------------------------------------------------------------------
# Exact ranks


def _brute_force_ranks(images, captions, index):
    """Ranks from the full matrix of the registry's plain float64 formula (no blocks, no tree)."""
    s = SIMILARITIES.get("order").reference(images, captions)
    rows = np.flatnonzero(np.bincount(index, minlength=len(images)) > 0)
    i2t = [int((s[i] > s[i, index == i].max()).sum()) for i in rows]
    t2i = [int((s[:, k] > s[index[k], k]).sum()) for k in range(len(index))]
    return rows, np.array(i2t), np.array(t2i)


def _quantised_case(seed, n_img=12, d=6, per_image=3):
    """Non-negative rows on a 1/8 grid: every violation is exact in float64 (so any two summation
    orders agree), with many exact ties between different rows, plus duplicated rows."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 9, size=(n_img, d)).astype(np.float32) / 8
    index = np.repeat(np.arange(n_img), per_image)
    captions = rng.integers(0, 9, size=(len(index), d)).astype(np.float32) / 8
    images[3] = images[2]                  # duplicate images: ties in T→I
    captions[7] = captions[1]              # a caption of image 2 duplicates one of image 0
    captions[10] = images[3]               # zero violation with images 2 and 3
    return images, captions, index


@pytest.mark.parametrize("seed", range(4))
def test_order_ranks_equal_brute_force_with_ties_and_duplicates(seed):
    images, captions, index = _quantised_case(seed)
    rows, i2t, t2i = _brute_force_ranks(images, captions, index)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions,
                                       caption_image_index=index, similarity="order")
    np.testing.assert_array_equal(ref.i2t, i2t)
    np.testing.assert_array_equal(ref.t2i, t2i)
    for block in (None, 1, 5):
        got = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions,
                                 caption_image_index=index, block_size=block, similarity="order")
        np.testing.assert_array_equal(got.i2t_image_rows, rows)
        np.testing.assert_array_equal(got.i2t, i2t)
        np.testing.assert_array_equal(got.t2i, t2i)
    # tiny budgets (several caption chunks per block) and the torch code on CPU tensors
    for device in ("cpu", torch.device("cpu")):
        i2t_all, t2i_all = O.order_rank_counts(images, captions, index, device=device, block_size=2,
                                               block_elements=3 * images.shape[1])
        np.testing.assert_array_equal(i2t_all[rows], i2t)
        np.testing.assert_array_equal(t2i_all, t2i)


def test_order_ties_favour_the_correct_item_by_hand():
    # Violations E(v, c) = ‖max(0, c − v)‖² (score −E): images 0 and 1 = (1, 1) dominate every
    # caption (E = 0: all tied); image 2 = (0, 0) has E = .5, .25, 0 with captions 0, 1, 2.
    images = np.array([[1.0, 1.0], [1.0, 1.0], [0.0, 0.0]], dtype=np.float32)
    captions = np.array([[0.5, 0.5], [0.5, 0.0], [0.0, 0.0]], dtype=np.float32)
    index = np.array([0, 1, 2])
    got = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions,
                             caption_image_index=index, similarity="order")
    # I→T: images 0, 1: every caption ties with the correct one → 0; image 2: c2 is the best → 0
    assert got.i2t.tolist() == [0, 0, 0]
    # T→I: c0 and c1: images 0 and 1 tie at 0 → 0; c2: every image ties at 0 → 0
    assert got.t2i.tolist() == [0, 0, 0]
    # Caption 2 = (1, 1) of image 2 = (0, 0): E = 2 with its image, 0 with images 0 and 1 (rank 2
    # in T→I); for image 2, captions 0 (.5) and 1 (.25) violate less (rank 2 in I→T).
    captions[2] = [1.0, 1.0]
    got = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions,
                             caption_image_index=index, similarity="order")
    assert got.t2i.tolist() == [0, 0, 2] and got.i2t.tolist() == [0, 0, 2]


def test_order_ranks_equal_the_per_query_reference_on_random_float32_rows():
    rng = np.random.default_rng(5)
    images = np.abs(rng.standard_normal((25, 33))).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    index = rng.integers(0, 25, size=80)
    index[:20] = np.arange(20)             # images 20..24 may have no caption (candidates only)
    captions = np.abs(images[index] + 0.5 * rng.standard_normal((80, 33)).astype(np.float32))
    captions /= np.linalg.norm(captions, axis=1, keepdims=True)
    captions[40] = captions[3]
    images[11] = images[10]
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions,
                                       caption_image_index=index, similarity="order")
    for block in (None, 3):
        got = ev.retrieval_ranks(image_embeddings=torch.from_numpy(images), caption_embeddings=captions,
                                 caption_image_index=index, block_size=block, similarity="order")
        np.testing.assert_array_equal(got.i2t, ref.i2t)
        np.testing.assert_array_equal(got.i2t_image_rows, ref.i2t_image_rows)
        np.testing.assert_array_equal(got.t2i, ref.t2i)
    m = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions,
                             caption_image_index=index, similarity="order")
    assert m == ev.retrieval_metrics_reference(image_embeddings=images, caption_embeddings=captions,
                                               caption_image_index=index, similarity="order")


def test_one_routine_gives_the_same_bits_in_blocks_pairs_and_torch():
    rng = np.random.default_rng(1)
    v = np.abs(rng.standard_normal((6, 37)))
    c = np.abs(rng.standard_normal((9, 37)))
    block = O.violation_block(v, c)
    rows, cols = np.meshgrid(np.arange(6), np.arange(9), indexing="ij")
    pairs = O.violation_pairs(v, c, v_rows=rows.ravel(), c_rows=cols.ravel()).reshape(6, 9)
    torch_block = O.violation_block(torch.from_numpy(v), torch.from_numpy(c)).numpy()
    assert np.array_equal(block, pairs) and np.array_equal(block, torch_block)
    np.testing.assert_allclose(-block, SIMILARITIES.get("order").reference(v, c), rtol=1e-14)
    np.testing.assert_array_equal(O.order_matrix64(v, c), -block)
    for d in (1, 2, 3, 8, 9):              # the halving tree adds every element once
        x = rng.standard_normal((4, d))
        np.testing.assert_allclose(O.halving_sum_(x.copy()), x.sum(axis=1), rtol=1e-14)


def test_order_blocks_are_memory_bounded():
    for n, m, d, rows, budget in [(1000, 5000, 1024, None, 1 << 16), (7, 3, 5, 4, 40),
                                  (10, 10, 100, 3, 50), (2, 2, 2, None, 1 << 26)]:
        r, c = O.order_block_shape(n, m, d, rows=rows, budget=budget)
        assert 1 <= r <= n and 1 <= c <= m
        assert r * c * d <= max(budget, d)  # at least one pair


def test_order_ranks_reject_bad_input():
    images = np.ones((2, 3), dtype=np.float32)
    captions = np.ones((2, 3), dtype=np.float32)
    captions[1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions,
                           caption_image_index=np.array([0, 1]), similarity="order")
    with pytest.raises(ValueError, match="unknown similarity function"):
        ev.retrieval_ranks(image_embeddings=images, caption_embeddings=images,
                           caption_image_index=np.array([0, 1]), similarity="euclid")


def test_mining_for_an_order_model_compares_captions_by_the_cosine():
    from pseudopairs.mining import nearest_neighbours

    rng = np.random.default_rng(2)
    queries, database = np.abs(rng.standard_normal((9, 6))), np.abs(rng.standard_normal((7, 6)))
    got = nearest_neighbours(queries, database, similarity="order")
    want = nearest_neighbours(queries, database)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    with pytest.raises(ValueError, match="unknown similarity function"):
        nearest_neighbours(queries, database, similarity="euclid")
