"""Tests for pseudopairs.evaluation: hand-computed ranks, ties, ordering, input types, CLI."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch

from pseudopairs import evaluation as ev
from pseudopairs.similarity import ranks as R
from pseudopairs.evaluation import step as evaluate_step

torch.set_num_threads(1)

# Explicit similarities: row = image, column = caption. With images = identity and captions = S.T,
# the dot product image_i · caption_k is exactly S[i, k].
S_HAND = np.array(
    [
        # c0    c1    c2    c3    c4    c5
        [0.90, 0.20, 0.50, 0.80, 0.10, 0.30],  # image 0: captions c0, c1, c2
        [0.40, 0.60, 0.70, 0.50, 0.20, 0.95],  # image 1: captions c3, c4
        [0.30, 0.10, 0.20, 0.60, 0.40, 0.05],  # image 2: caption  c5
    ],
    dtype=np.float32,
)
INDEX_HAND = np.array([0, 0, 0, 1, 1, 2])
# By hand (rank = #candidates strictly higher than the correct one):
#  I→T image 0: best correct = c0 0.90, nothing higher                     → 0
#      image 1: best correct = c3 0.50; higher: c1 .60, c2 .70, c5 .95      → 3
#      image 2: correct c5 0.05; every other caption is higher             → 5
#  T→I c0 col [.9,.4,.3] img0 → 0;  c1 [.2,.6,.1] img0 → 1;  c2 [.5,.7,.2] img0 → 1
#      c3 [.8,.5,.6] img1 → 2;  c4 [.1,.2,.4] img1 → 1;  c5 [.3,.95,.05] img2 → 2
I2T_HAND = [0, 3, 5]
T2I_HAND = [0, 1, 1, 2, 1, 2]


def hand_inputs():
    return np.eye(3, dtype=np.float32), np.ascontiguousarray(S_HAND.T), INDEX_HAND.copy()


def from_similarity(sim: np.ndarray):
    """(images, captions) whose dot products are exactly ``sim`` (images × captions)."""
    sim = np.asarray(sim, dtype=np.float32)
    return np.eye(sim.shape[0], dtype=np.float32), np.ascontiguousarray(sim.T)


def test_hand_case_ranks_and_metrics():
    images, captions, index = hand_inputs()
    ranks = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert ranks.i2t.tolist() == I2T_HAND
    assert ranks.i2t_image_rows.tolist() == [0, 1, 2]
    assert ranks.t2i.tolist() == T2I_HAND

    m = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert list(m) == list(ev.METRIC_KEYS)
    assert all(type(v) is float for v in m.values())
    assert m["i2t_r1"] == pytest.approx(100 / 3)
    assert m["i2t_r5"] == pytest.approx(200 / 3)  # rank 5 is not < 5
    assert m["i2t_r10"] == 100.0
    assert m["i2t_medr"] == 4.0  # median(0, 3, 5) = 3 → 3 + 1
    assert m["t2i_r1"] == pytest.approx(100 / 6)
    assert m["t2i_r5"] == 100.0
    assert m["t2i_r10"] == 100.0
    assert m["t2i_medr"] == 2.0  # sorted 0,1,1,1,2,2 → median 1 → 2
    assert m["rsum"] == pytest.approx(100 / 3 + 200 / 3 + 100 + 100 / 6 + 100 + 100)
    assert ev.language_sum(m) == pytest.approx(m["rsum"])

    ref = ev.retrieval_metrics_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert ref == m


def test_recall_at_10_boundary():
    # image 0 owns c10 with 10 captions above it (rank 10: outside R@10);
    # image 1 owns c11 with 9 captions above it (rank 9: inside R@10); image 2 owns c0..c9.
    sim = np.zeros((3, 12), dtype=np.float32)
    sim[0, :10] = np.linspace(0.5, 0.9, 10)
    sim[0, 10] = 0.4
    sim[1, :9] = 0.8
    sim[1, 9] = 0.1
    sim[1, 11] = 0.5
    sim[2, :10] = 1.0
    images, captions = from_similarity(sim)
    index = np.array([2] * 10 + [0, 1])
    ranks = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert ranks.i2t.tolist() == [10, 9, 0]
    m = ev.metrics_from_ranks(i2t_ranks=ranks.i2t, t2i_ranks=ranks.t2i)
    assert m["i2t_r10"] == pytest.approx(200 / 3)
    assert m["i2t_r5"] == pytest.approx(100 / 3)


def test_ties_favour_the_correct_item():
    sim = np.array(
        [
            [0.5, 0.5, 0.7, 0.7],  # image 0 owns c0: c2, c3 strictly higher, c1 tied → 2
            [0.5, 0.2, 0.3, 0.3],  # image 1 owns c1, c2: best 0.3 (c2), c0 higher, c3 tied → 1
            [0.1, 0.1, 0.1, 0.7],  # image 2 owns c3: tied with nothing higher → 0
        ],
        dtype=np.float32,
    )
    images, captions = from_similarity(sim)
    index = np.array([0, 1, 1, 2])
    ranks = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert ranks.i2t.tolist() == [2, 1, 0]
    # T→I: c0 col [.5,.5,.1] img0 tie → 0; c1 [.5,.2,.1] img1 → 1; c2 [.7,.3,.1] img1 → 1;
    #      c3 [.7,.3,.7] img2 tie with img0 → 0
    assert ranks.t2i.tolist() == [0, 1, 1, 0]
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert ref.i2t.tolist() == [2, 1, 0] and ref.t2i.tolist() == [0, 1, 1, 0]
    # All candidates identical: everything is rank 0.
    flat = np.ones((4, 3), dtype=np.float32) / np.sqrt(3)
    m = ev.retrieval_metrics(image_embeddings=flat, caption_embeddings=flat.repeat(2, 0), caption_image_index=np.arange(8) // 2)
    assert m["i2t_r1"] == 100.0 and m["t2i_r1"] == 100.0 and m["i2t_medr"] == 1.0


def test_shuffled_captions_match_grouped():
    images, captions, index = hand_inputs()
    base = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    perm = np.array([5, 2, 3, 0, 4, 1])
    ranks = ev.retrieval_ranks(
        image_embeddings=images, caption_embeddings=captions[perm], caption_image_index=index[perm]
    )
    assert ranks.t2i.tolist() == [T2I_HAND[p] for p in perm]
    assert ranks.i2t.tolist() == I2T_HAND
    shuffled = ev.retrieval_metrics(
        image_embeddings=images, caption_embeddings=captions[perm], caption_image_index=index[perm]
    )
    assert shuffled == base


def test_numpy_and_torch_inputs_agree():
    images, captions, index = hand_inputs()
    base = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    as_torch = ev.retrieval_metrics(
        image_embeddings=torch.from_numpy(images),
        caption_embeddings=torch.from_numpy(captions).double().requires_grad_(True),
        caption_image_index=torch.from_numpy(index),
    )
    assert as_torch == base
    as_lists = ev.retrieval_metrics(
        image_embeddings=images.tolist(), caption_embeddings=captions.tolist(), caption_image_index=index.tolist()
    )
    assert as_lists == base
    tr = ev.translation_retrieval(source_embeddings=torch.from_numpy(captions[:3]), target_embeddings=images)
    assert tr == ev.translation_retrieval(source_embeddings=captions[:3], target_embeddings=images)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    images, captions, index = hand_inputs()
    cpu = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    gpu = ev.retrieval_metrics(
        image_embeddings=torch.from_numpy(images).cuda(), caption_embeddings=captions, caption_image_index=index
    )
    assert gpu == cpu


def test_image_without_captions_is_candidate_but_not_query():
    # Image 3 has no caption; it scores highest for c0, so c0's T→I rank becomes 1.
    sim = np.vstack([S_HAND, np.array([[0.99, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=np.float32)])
    images, captions = from_similarity(sim)
    ranks = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=INDEX_HAND)
    assert ranks.i2t_image_rows.tolist() == [0, 1, 2]
    assert ranks.i2t.tolist() == I2T_HAND
    assert ranks.t2i.tolist() == [1] + T2I_HAND[1:]
    m = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=INDEX_HAND)
    assert m["i2t_r1"] == pytest.approx(100 / 3)  # 3 queries, not 4
    assert m["t2i_r1"] == 0.0
    # The caption-less image in the middle of the table.
    order = [0, 3, 1, 2]
    mid = ev.retrieval_ranks(
        image_embeddings=images[order], caption_embeddings=captions,
        caption_image_index=np.array([0, 0, 0, 2, 2, 3]),
    )
    assert mid.i2t_image_rows.tolist() == [0, 2, 3]
    assert mid.i2t.tolist() == I2T_HAND and mid.t2i.tolist() == ranks.t2i.tolist()


def test_median_rank_formula():
    assert ev.median_rank(np.array([0, 1, 2, 3])) == 2.0  # median 1.5 → floor 1 → +1
    assert ev.median_rank(np.array([0, 2, 3, 9])) == 3.0  # median 2.5 → 2 → 3
    assert ev.median_rank(np.array([4])) == 5.0
    m = ev.metrics_from_ranks(i2t_ranks=np.array([0, 4, 5, 9, 10, 20]), t2i_ranks=np.array([0, 1, 2, 3]))
    assert m["i2t_r1"] == pytest.approx(100 / 6)
    assert m["i2t_r5"] == pytest.approx(200 / 6)
    assert m["i2t_r10"] == pytest.approx(400 / 6)
    assert m["i2t_medr"] == 8.0  # median (5 + 9)/2 = 7 → 8
    assert m["t2i_medr"] == 2.0
    assert m["t2i_r1"] == 25.0 and m["t2i_r5"] == 100.0


def test_translation_retrieval_hand_case():
    # source row i's similarity to each target row; targets = identity.
    sim = np.array([[0.9, 0.1, 0.2], [0.8, 0.7, 0.1], [0.3, 0.3, 0.3]], dtype=np.float32)
    source, target = sim, np.eye(3, dtype=np.float32)
    # row 0: target 0 top → 0; row 1: 0.8 > 0.7 → 1; row 2: all tied → 0
    assert ev.translation_ranks(source_embeddings=source, target_embeddings=target).tolist() == [0, 1, 0]
    assert ev.translation_ranks_reference(source_embeddings=source, target_embeddings=target).tolist() == [0, 1, 0]
    result = ev.translation_retrieval(source_embeddings=source, target_embeddings=target)
    assert result == {"r1": pytest.approx(200 / 3)}
    assert type(result["r1"]) is float
    # Swapping direction uses the transposed similarities: col 0 [.9,.8,.3] → 0; col 1 [.1,.7,.3] → 0;
    # col 2 [.2,.1,.3] → 0.
    assert ev.translation_retrieval(source_embeddings=target, target_embeddings=source) == {"r1": 100.0}


def _quantised(rng, n, d, levels):
    return rng.integers(-levels, levels + 1, size=(n, d)).astype(np.float32)


@pytest.mark.parametrize("seed", range(12))
def test_vectorised_equals_reference_random(seed):
    rng = np.random.default_rng(seed)
    n_img, d = int(rng.integers(5, 30)), int(rng.integers(2, 6))
    # Small integer entries: dot products are exact in float32 and ties are frequent.
    images = _quantised(rng, n_img, d, levels=int(rng.integers(1, 3)))
    n_cap = int(rng.integers(1, 4 * n_img))
    index = rng.integers(0, n_img, size=n_cap)  # ungrouped; some images have none
    captions = _quantised(rng, n_cap, d, levels=2)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    for block in (None, 1, 3):
        got = ev.retrieval_ranks(
            image_embeddings=images, caption_embeddings=captions, caption_image_index=index, block_size=block
        )
        np.testing.assert_array_equal(got.i2t, ref.i2t)
        np.testing.assert_array_equal(got.i2t_image_rows, ref.i2t_image_rows)
        np.testing.assert_array_equal(got.t2i, ref.t2i)
    assert ev.retrieval_metrics(
        image_embeddings=images, caption_embeddings=captions, caption_image_index=index, block_size=4
    ) == ev.retrieval_metrics_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    n = min(n_img, n_cap)
    np.testing.assert_array_equal(
        ev.translation_ranks(source_embeddings=captions[:n], target_embeddings=images[:n], block_size=2),
        ev.translation_ranks_reference(source_embeddings=captions[:n], target_embeddings=images[:n]),
    )


def test_vectorised_equals_reference_normalised_floats():
    rng = np.random.default_rng(123)
    images = rng.standard_normal((40, 16)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    index = np.repeat(np.arange(40), 5)
    captions = images[index] + 0.8 * rng.standard_normal((200, 16)).astype(np.float32)
    captions /= np.linalg.norm(captions, axis=1, keepdims=True)
    got = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index, block_size=7)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    np.testing.assert_array_equal(got.i2t, ref.i2t)
    np.testing.assert_array_equal(got.t2i, ref.t2i)
    m = ev.metrics_from_ranks(i2t_ranks=got.i2t, t2i_ranks=got.t2i)
    assert 0 < m["t2i_r1"] < 100  # a non-trivial case


def test_keyword_only():
    images, captions, index = hand_inputs()
    with pytest.raises(TypeError):
        ev.retrieval_metrics(images, captions, index)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ev.retrieval_metrics_reference(images, captions, index)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ev.translation_retrieval(captions[:3], images)  # type: ignore[misc]
    with pytest.raises(TypeError):
        ev.metrics_from_ranks(np.array([0]), np.array([0]))  # type: ignore[misc]


def test_sums():
    en = {k: 10.0 for k in ev.RECALL_KEYS} | {"i2t_medr": 3.0, "t2i_medr": 4.0, "rsum": 60.0}
    de = {k: 1.5 for k in ev.RECALL_KEYS}
    assert ev.language_sum(en) == 60.0
    assert ev.language_sum(de) == 9.0
    assert ev.sum_of_sums({"en": en, "de": de}) == 69.0
    with pytest.raises(ValueError, match="t2i_r10"):
        ev.language_sum({k: 1.0 for k in ev.RECALL_KEYS if k != "t2i_r10"})
    with pytest.raises(ValueError, match="'de'"):
        ev.sum_of_sums({"en": en, "de": {}})
    with pytest.raises(ValueError):
        ev.sum_of_sums({})


def test_bad_inputs_are_reported():
    images, captions, index = hand_inputs()

    def call(**overrides):
        kwargs = dict(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
        kwargs.update(overrides)
        return ev.retrieval_metrics(**kwargs)

    with pytest.raises(ValueError, match="caption_image_index: entry 2 is 3"):
        call(caption_image_index=np.array([0, 0, 3, 1, 1, 2]))
    with pytest.raises(ValueError, match="caption_image_index: has 5 entries"):
        call(caption_image_index=index[:5])
    with pytest.raises(ValueError, match="caption_image_index: expected integer"):
        call(caption_image_index=index.astype(float))
    with pytest.raises(ValueError, match="dimensions"):
        call(caption_embeddings=captions[:, :2])
    with pytest.raises(ValueError, match="caption_embeddings: contains NaN"):
        bad = captions.copy()
        bad[1, 1] = np.nan
        call(caption_embeddings=bad)
    with pytest.raises(ValueError, match="image_embeddings: expected a 2-D"):
        call(image_embeddings=images[0])
    with pytest.raises(ValueError, match="no captions"):
        call(caption_embeddings=captions[:0], caption_image_index=index[:0])
    with pytest.raises(ValueError, match="must be a translation pair"):
        ev.translation_retrieval(source_embeddings=captions, target_embeddings=images)
    with pytest.raises(ValueError, match="image_embeddings: values too large for float32"):
        call(image_embeddings=images.astype(np.float64) * 1e300)
    with pytest.raises(ValueError, match="source_embeddings: contains NaN"):
        bad = captions.copy()
        bad[0, 0] = np.inf
        ev.translation_retrieval(source_embeddings=bad, target_embeddings=captions)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def run_cli(argv):
    parser = argparse.ArgumentParser(prog="pseudopairs")
    evaluate_step.register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_score_embeddings(tmp_path):
    images, captions, index = hand_inputs()
    np.save(tmp_path / "img.npy", images)
    np.save(tmp_path / "cap.npy", captions)
    np.save(tmp_path / "idx.npy", index)
    out = tmp_path / "sub" / "metrics.json"
    argv = ["score-embeddings", "--images", str(tmp_path / "img.npy"), "--captions", str(tmp_path / "cap.npy"),
            "--caption-image-index", str(tmp_path / "idx.npy"), "--output", str(out), "--device", "cpu"]
    assert run_cli(argv) == 0
    written = json.loads(out.read_text())
    assert written == ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert written["i2t_medr"] == 4.0
    assert [p.name for p in out.parent.iterdir()] == ["metrics.json"]  # no temporary left behind


def test_cli_score_embeddings_errors_name_the_file(tmp_path):
    images, captions, index = hand_inputs()
    np.save(tmp_path / "img.npy", images)
    np.save(tmp_path / "cap.npy", captions)
    np.save(tmp_path / "idx.npy", np.array([0, 0, 0, 1, 1, 7]))
    out = tmp_path / "metrics.json"
    base = ["score-embeddings", "--images", str(tmp_path / "img.npy"), "--captions", str(tmp_path / "cap.npy"),
            "--output", str(out), "--device", "cpu"]
    with pytest.raises(ValueError, match=r"idx\.npy: entry 5 is 7"):
        run_cli(base + ["--caption-image-index", str(tmp_path / "idx.npy")])
    with pytest.raises(FileNotFoundError, match=r"missing\.npy"):
        run_cli(base + ["--caption-image-index", str(tmp_path / "missing.npy")])
    (tmp_path / "junk.npy").write_text("not numpy")
    with pytest.raises(ValueError, match=r"junk\.npy: not a readable"):
        run_cli(base + ["--caption-image-index", str(tmp_path / "junk.npy")])
    assert not out.exists()


def test_cli_score_translation(tmp_path):
    sim = np.array([[0.9, 0.1, 0.2], [0.8, 0.7, 0.1], [0.3, 0.3, 0.3]], dtype=np.float32)
    np.save(tmp_path / "en.npy", sim)
    np.save(tmp_path / "de.npy", np.eye(3, dtype=np.float32))
    out = tmp_path / "tr.json"
    assert run_cli(["score-translation", "--source", str(tmp_path / "en.npy"), "--target", str(tmp_path / "de.npy"),
                    "--output", str(out), "--device", "cpu"]) == 0
    assert json.loads(out.read_text()) == {"r1": pytest.approx(200 / 3)}


# ---------------------------------------------------------------------------------------------
# metrics.json inputs (pseudopairs.evaluation.step): caption rows and translation pairs
# ---------------------------------------------------------------------------------------------


def _caption_frame(rows):
    import pandas as pd

    return pd.DataFrame(rows, columns=["image_id", "lang", "caption_idx", "text"])


def test_parallel_texts_pair_by_image_and_caption_index_in_any_order():
    from pseudopairs.evaluation.step import parallel_texts

    frame = _caption_frame([
        ("b", "de", 0, "ein hund"), ("a", "en", 0, "a cat"), ("b", "en", 0, "a dog"),
        ("a", "de", 1, "eine maus"), ("a", "de", 0, "eine katze"), ("a", "en", 1, "a mouse"),
    ])
    en, de = parallel_texts(frame, source_lang="en", target_lang="de", source="t1.parquet")
    # Row i of one side translates row i of the other (the order itself does not matter).
    assert sorted(zip(en, de)) == [("a cat", "eine katze"), ("a dog", "ein hund"), ("a mouse", "eine maus")]
    de2, en2 = parallel_texts(frame, source_lang="de", target_lang="en", source="t1.parquet")
    assert sorted(zip(en2, de2)) == sorted(zip(en, de))
    unpaired = frame[~((frame["image_id"] == "b") & (frame["lang"] == "de"))]
    with pytest.raises(ValueError, match=r"t1\.parquet: 3 en and 2 de captions do not pair up"):
        parallel_texts(unpaired, source_lang="en", target_lang="de", source="t1.parquet")


def test_caption_rows_map_captions_to_feature_rows_and_drop_missing_images(caplog, tmp_path):
    import logging

    from pseudopairs.evaluation.step import caption_rows

    features = tmp_path / "test.npz"  # only its skipped report is read here
    (tmp_path / "test.skipped.tsv").write_text("image_id\tpath\treason\nz\tz.png\tbroken\n")
    frame = _caption_frame([("x", "en", 0, "one"), ("y", "de", 0, "zwei"), ("z", "en", 0, "three"),
                            ("y", "en", 1, "two")])
    with caplog.at_level(logging.WARNING):
        texts, rows = caption_rows(frame, ["y", "x"], lang="en", source="test.parquet",
                                   features=features)
    assert texts == ["one", "two"] and rows.tolist() == [1, 0]
    assert "test.parquet: 1 en captions have no image features; dropped" in caplog.text
    with pytest.raises(ValueError, match=r"test\.parquet: 1 image\(s\) .* nor listed as skipped .*: 'y'"):
        caption_rows(frame, ["x"], lang="en", source="test.parquet", features=features)
    with pytest.raises(ValueError, match=r"test\.parquet: no captions in language 'fr'"):
        caption_rows(frame, ["x"], lang="fr", source="test.parquet", features=features)


# ---------------------------------------------------------------------------------------------
# The exact rank rule: float64 scores decide what float32 cannot
# ---------------------------------------------------------------------------------------------


def test_float32_tie_is_decided_by_the_exact_score():
    # image x = (1, 1); its caption c0 = (1, 0) scores exactly 1. Caption c1 = (1 - 2**-24, 2**-23)
    # scores 1 + 2**-24 exactly, but float32 rounds that to 1 (a tie, which the old "same float32
    # block" rule gave to the correct caption: rank 0). Exactly, c1 is higher: rank 1.
    images = np.array([[1.0, 1.0], [0.0, 1.0]], dtype=np.float32)
    captions = np.array([[1.0, 0.0], [1 - 2.0**-24, 2.0**-23]], dtype=np.float32)
    assert np.float32(images[0] @ captions[1]) == np.float32(1.0)  # the float32 tie
    index = np.array([0, 1])
    for block in (None, 1):
        ranks = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions,
                                   caption_image_index=index, block_size=block)
        assert ranks.i2t.tolist() == [1, 0]
        # T→I for c1: image 0 scores 1 + 2**-24 − ... exactly 1 - 2**-24 + 2**-23 vs its own
        # image (0, 1): 2**-23 → image 0 is higher: rank 1. c0: image 0 (1) vs image 1 (0) → 0.
        assert ranks.t2i.tolist() == [0, 1]
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    assert ref.i2t.tolist() == [1, 0] and ref.t2i.tolist() == [0, 1]
    assert ev.translation_ranks(source_embeddings=images, target_embeddings=captions).tolist() == [1, 0]
    assert ev.translation_ranks_reference(source_embeddings=images, target_embeddings=captions).tolist() == [1, 0]


def _near_tie_case(seed: int):
    """Normalised random rows plus, for several queries, competitors that duplicate the correct
    item exactly (a tie: not counted) or differ from it by one ulp in one element (decided by
    the sign of that element's product: counted or not)."""
    rng = np.random.default_rng(seed)
    n_img, d = 30, 24
    images = rng.standard_normal((n_img, d)).astype(np.float32)
    images /= np.linalg.norm(images, axis=1, keepdims=True)
    index = np.repeat(np.arange(n_img), 3)
    captions = images[index] + 0.7 * rng.standard_normal((len(index), d)).astype(np.float32) / np.sqrt(d)
    captions /= np.linalg.norm(captions, axis=1, keepdims=True)
    captions = captions.astype(np.float32)
    for k in range(0, 60, 6):  # caption k + 3 (another image's) copies caption k, ± one ulp
        twin = captions[k].copy()
        if k % 12 == 6:
            j = int(np.argmax(np.abs(images[index[k]])))
            up = np.sign(images[index[k], j]) > 0
            twin[j] = np.nextafter(twin[j], np.float32(np.inf if up else -np.inf))  # exactly higher
        captions[k + 3] = twin
    for i in range(0, n_img, 7):  # image i + 1 duplicates image i: ties in T→I
        images[i + 1] = images[i]
    return images, captions, index


@pytest.mark.parametrize("seed", range(3))
def test_duplicates_and_one_ulp_near_ties_match_the_exact_reference(seed):
    images, captions, index = _near_tie_case(seed)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    for block in (None, 1, 4, 13):  # one block (thresholds from the block) and several (precomputed)
        got = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index,
                                 block_size=block)
        np.testing.assert_array_equal(got.i2t, ref.i2t)
        np.testing.assert_array_equal(got.t2i, ref.t2i)
    # The torch code (the CUDA path) on CPU tensors.
    got = R._retrieval_ranks_on(images, captions, index, device=torch.device("cpu"), block_size=7)
    np.testing.assert_array_equal(got.i2t, ref.i2t)
    np.testing.assert_array_equal(got.t2i, ref.t2i)
    tr = R._translation_ranks_on(captions[:30], images, device=torch.device("cpu"), block_size=4)
    np.testing.assert_array_equal(tr, ev.translation_ranks_reference(source_embeddings=captions[:30],
                                                                     target_embeddings=images))


def test_exact_ties_between_duplicates_favour_the_correct_item():
    images, captions, index = _near_tie_case(0)
    # image 1 duplicates image 0: every caption of image 0 has image 1 tied with its own image
    ranks = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    scores = R._exact_scores(captions, images, 0)
    assert scores[0] == scores[1]
    own = ranks.t2i[index == 0]
    expected = [int((R._exact_scores(captions, images, k) > R._exact_scores(captions, images, k)[0]).sum())
                for k in np.flatnonzero(index == 0)]
    assert own.tolist() == expected  # image 1 (equal) is not counted
    # caption 9 is caption 6 plus one ulp towards image 2 (its image is 3): exactly higher
    s6 = R._exact_scores(images, captions, index[6])
    assert s6[9] > s6[6] and s6[9] - s6[6] < 1e-6


# ---------------------------------------------------------------------------------------------
# Mean recall (paper 002's mR) and the similarity a model is ranked with


def test_mean_recall_is_the_mean_of_the_six_recalls_on_the_hand_case():
    images, captions, index = hand_inputs()
    m = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    # by hand (test_hand_case_ranks_and_metrics): I→T R@1, 5, 10 = 100/3, 200/3, 100;
    # T→I = 100/6, 100, 100 → mean (100/3 + 200/3 + 100 + 100/6 + 100 + 100) / 6 = 2500/36
    assert m["mean_recall"] == pytest.approx(2500 / 36)
    assert m["mean_recall"] == pytest.approx(np.mean([m[k] for k in ev.RECALL_KEYS]))
    assert m["mean_recall"] == pytest.approx(m["rsum"] / 6)
    assert list(m)[-2:] == ["rsum", "mean_recall"]
    from pseudopairs.similarity.metrics import mean_recall

    assert mean_recall({k: 50.0 for k in ev.RECALL_KEYS}) == 50.0
    with pytest.raises(ValueError, match="lack"):
        mean_recall({"i2t_r1": 1.0})


def test_metrics_take_the_similarity_and_the_cli_too(tmp_path):
    # Order similarity on a hand case: images (1, 1) and (0, 0); captions (0.5, 0.5) of image 0
    # and (0, 0) of image 1. Violations: image 0 dominates both (0, 0): ties; image 1 = (0, 0)
    # violates caption 0 by 0.5. I→T: both 0. T→I: caption 0 → 0, caption 1: image 0 ties → 0.
    images = np.array([[1.0, 1.0], [0.0, 0.0]], dtype=np.float32)
    captions = np.array([[0.5, 0.5], [0.0, 0.0]], dtype=np.float32)
    index = np.array([0, 1])
    m = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index,
                             similarity="order")
    assert m["i2t_r1"] == 100.0 and m["t2i_r1"] == 100.0 and m["mean_recall"] == 100.0
    dot = ev.retrieval_metrics(image_embeddings=images + 0.1, caption_embeddings=captions + 0.1,
                               caption_image_index=index)
    assert dot["i2t_r1"] == 50.0     # the default (dot products): image 1 = (.1, .1) prefers caption 0
    for name, x in (("img", images), ("cap", captions), ("idx", index)):
        np.save(tmp_path / f"{name}.npy", x)
    out = tmp_path / "metrics.json"
    assert run_cli(["score-embeddings", "--images", str(tmp_path / "img.npy"), "--captions",
                    str(tmp_path / "cap.npy"), "--caption-image-index", str(tmp_path / "idx.npy"),
                    "--output", str(out), "--device", "cpu", "--similarity", "order"]) == 0
    assert json.loads(out.read_text()) == m


# ---------------------------------------------------------------------------------------------
# The bf16 candidate GEMM (pseudopairs.similarity.lowp): forced on (each CPU kernel) and off,
# the ranks equal the exact reference and each other
# ---------------------------------------------------------------------------------------------

BF16_PATHS = [(False, None), (True, "onednn"), (True, "mkl"), (True, "emulated")]


@pytest.mark.parametrize("seed", range(3))
def test_bf16_and_float32_candidate_paths_give_the_exact_ranks(seed):
    from pseudopairs.similarity import bf16_mode

    images, captions, index = _near_tie_case(seed)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    tr_ref = ev.translation_ranks_reference(source_embeddings=captions[:30], target_embeddings=images)
    for enabled, kernel in BF16_PATHS:
        with bf16_mode(enabled, kernel=kernel):
            for block in (None, 1, 13):
                got = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions,
                                         caption_image_index=index, block_size=block)
                np.testing.assert_array_equal(got.i2t, ref.i2t)
                np.testing.assert_array_equal(got.t2i, ref.t2i)
            got = R._retrieval_ranks_on(images, captions, index, device=torch.device("cpu"), block_size=7)
            np.testing.assert_array_equal(got.i2t, ref.i2t)
            np.testing.assert_array_equal(got.t2i, ref.t2i)
            tr = ev.translation_ranks(source_embeddings=captions[:30], target_embeddings=images, block_size=4)
            np.testing.assert_array_equal(tr, tr_ref)


def test_bf16_path_on_quantised_ties_and_unnormalised_rows():
    from pseudopairs.similarity import bf16_mode

    rng = np.random.default_rng(77)
    images = _quantised(rng, 25, 6, levels=3) * np.float32(0.37)  # not bf16-exact values
    index = rng.integers(0, 25, size=70)
    captions = _quantised(rng, 70, 6, levels=2) * np.float32(1.9)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    for enabled, kernel in BF16_PATHS:
        with bf16_mode(enabled, kernel=kernel):
            for block in (None, 4):
                got = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions,
                                         caption_image_index=index, block_size=block)
                np.testing.assert_array_equal(got.i2t, ref.i2t)
                np.testing.assert_array_equal(got.t2i, ref.t2i)


# ---------------------------------------------------------------------------------------------
# Ranks counted on the device (pseudopairs.similarity.device_ranks): the float64 settling there,
# in numpy's pairwise order, the same ranks and metrics as the CPU engine (tested on CPU tensors
# through the same code the GPU runs)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [1, 5, 8, 13, 100, 128, 129, 300, 1000, 1024, 1031, 2048])
def test_device_dot64_gives_numpys_pairwise_bits(dim):
    from pseudopairs.similarity import dot64_pairs
    from pseudopairs.similarity.device_ranks import dot64_rows, pairwise_sum64

    rng = np.random.default_rng(dim)
    x = rng.standard_normal((300, dim)).astype(np.float32)
    y = (rng.standard_normal((300, dim)) * 10.0 ** rng.integers(-3, 4, size=(300, 1))).astype(np.float32)
    rows = np.arange(300)
    want = dot64_pairs(x, y, x_rows=rows, y_rows=rows)
    got = dot64_rows(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    assert got.tobytes() == want.tobytes()      # bit for bit, not merely close
    products = np.multiply(x, y, dtype=np.float64)
    assert pairwise_sum64(torch.from_numpy(products)).numpy().tobytes() == np.add.reduce(products, axis=1).tobytes()
    if dim >= 100:  # a plain float64 sum (another order) differs somewhere: the order matters
        assert torch.from_numpy(products).sum(dim=1).numpy().tobytes() != want.tobytes()


@pytest.mark.parametrize("seed", range(3))
def test_device_ranks_equal_the_cpu_engine_and_the_reference(seed):
    images, captions, index = _near_tie_case(seed)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    cpu = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    for block in (None, 1, 7):
        got = R._retrieval_ranks_on(images, captions, index, device=torch.device("cpu"), block_size=block)
        for ranks in (ref, cpu):
            np.testing.assert_array_equal(got.i2t, ranks.i2t)
            np.testing.assert_array_equal(got.i2t_image_rows, ranks.i2t_image_rows)
            np.testing.assert_array_equal(got.t2i, ranks.t2i)
    tr = R._translation_ranks_on(captions[:30], images, device=torch.device("cpu"))
    np.testing.assert_array_equal(tr, ev.translation_ranks(source_embeddings=captions[:30], target_embeddings=images))


def test_device_ranks_settle_quantised_ties_and_images_without_captions():
    """Scores that are exact multiples of 2**-20 tie often; images 0-4 have no caption (no I→T
    query, still T→I candidates); the windows hold many entries, all settled in float64 on the
    device."""
    from pseudopairs.similarity.device_ranks import device_rank_counts

    rng = np.random.default_rng(5)
    images = _quantised(rng, 40, 16, levels=2)
    index = rng.integers(5, 40, size=160)
    captions = _quantised(rng, 160, 16, levels=2)
    ref = ev.retrieval_ranks_reference(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    i2t, t2i = device_rank_counts(images, captions, index, device=torch.device("cpu"), block_rows=9)
    np.testing.assert_array_equal(i2t.numpy()[ref.i2t_image_rows], ref.i2t)
    np.testing.assert_array_equal(t2i.numpy(), ref.t2i)
    assert i2t[:5].tolist() == [0] * 5


def test_device_metrics_are_the_cpu_metrics():
    from pseudopairs.similarity.metrics import metrics_of_counts

    for seed in range(2):
        images, captions, index = _near_tie_case(seed)
        want = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
        i2t, rows, t2i = R.device_retrieval_counts(images, captions, index, device=torch.device("cpu"))
        assert metrics_of_counts(i2t, rows, t2i) == want     # the same floats, key by key
    # by hand: ranks 0, 3, 1, 8 (even: median (1 + 3) / 2 = 2 -> 3) and 2, 2, 0 (odd: 2 -> 3)
    got = metrics_of_counts(torch.tensor([0, 3, 9, 1, 8]), torch.tensor([0, 1, 3, 4]), torch.tensor([2, 2, 0]))
    assert (got["i2t_r1"], got["i2t_r5"], got["i2t_r10"], got["i2t_medr"]) == (25.0, 75.0, 100.0, 3.0)
    assert (got["t2i_r1"], got["t2i_medr"]) == (100.0 / 3, 3.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_device_ranks_and_metrics_equal_the_cpu_engine():
    images, captions, index = _near_tie_case(1)
    cpu = ev.retrieval_ranks(image_embeddings=images, caption_embeddings=captions, caption_image_index=index)
    gpu = ev.retrieval_ranks(image_embeddings=torch.from_numpy(images).cuda(),
                             caption_embeddings=torch.from_numpy(captions).cuda(), caption_image_index=index)
    np.testing.assert_array_equal(gpu.i2t, cpu.i2t)
    np.testing.assert_array_equal(gpu.t2i, cpu.t2i)
    metrics = ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions, caption_image_index=index,
                                   device="cuda")
    assert metrics == ev.retrieval_metrics(image_embeddings=images, caption_embeddings=captions,
                                           caption_image_index=index)
