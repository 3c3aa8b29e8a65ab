"""The ranking model, its loss, and the training data plumbing (caption sets, c2c pairs, batch
streams, task sampler)."""

from __future__ import annotations

import io
import logging

import numpy as np
import pandas as pd
import pytest
import torch

from pseudopairs.model.batches import (BatchStream, C2CData, C2IData, TaskSampler, TokenTable, c2c_pairs,
                              load_caption_set)
from pseudopairs.core.io import save_features
from pseudopairs.model import RankingModel, contrastive_loss
from pseudopairs.data.vocab import build_vocabulary

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------------
# contrastive_loss


def _hand_case():
    # a_i · b_j worked out by hand:
    #   s = [[1,   0,   0   ],
    #        [0,   1,   0.6 ],
    #        [0.6, 0.8, 0.48]]      diagonal 1, 1, 0.48; margin 0.2
    # cost_b[i,j] = max(0, .2 - s_ii + s_ij): only row 2 violates: j=0 → .32, j=1 → .52
    # cost_a[i,j] = max(0, .2 - s_ii + s_ji): only row 2, j=1 (s_12 = .6) → .32
    #   (row 1, j=2: .2 - 1 + .8 = 0, no violation)
    a = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0.6, 0.8, 0]])
    b = torch.tensor([[1.0, 0, 0], [0, 1.0, 0], [0, 0.6, 0.8]])
    return a, b


def test_contrastive_loss_max_violation_by_hand():
    a, b = _hand_case()
    loss = contrastive_loss(a, b, margin=0.2, max_violation=True)
    assert loss.ndim == 0
    assert loss.item() == pytest.approx(0.52 + 0.32, abs=1e-6)


def test_contrastive_loss_sum_of_violations_by_hand():
    a, b = _hand_case()
    loss = contrastive_loss(a, b, margin=0.2, max_violation=False)
    assert loss.item() == pytest.approx(0.32 + 0.52 + 0.32, abs=1e-6)


def test_contrastive_loss_excludes_the_diagonal():
    # a = b = identity, margin 1.5: every off-diagonal cost is 1.5 - 1 + 0 = 0.5; a diagonal term
    # (1.5 - 1 + 1 = 1.5) would dominate the max if it were not masked.
    eye = torch.eye(2)
    assert contrastive_loss(eye, eye, margin=1.5).item() == pytest.approx(4 * 0.5)
    assert contrastive_loss(eye, eye, margin=1.5, max_violation=False).item() == pytest.approx(4 * 0.5)
    # Perfectly separated pairs with a small margin cost nothing.
    assert contrastive_loss(eye, eye, margin=0.2).item() == 0.0


def test_contrastive_loss_matches_a_loop_on_random_data():
    gen = torch.Generator().manual_seed(0)
    a = torch.nn.functional.normalize(torch.randn(7, 5, generator=gen), dim=1)
    b = torch.nn.functional.normalize(torch.randn(7, 5, generator=gen), dim=1)
    s = (a @ b.T).tolist()
    hardest = total = 0.0
    for i in range(7):
        cb = [max(0.0, 0.3 - s[i][i] + s[i][j]) for j in range(7) if j != i]
        ca = [max(0.0, 0.3 - s[i][i] + s[j][i]) for j in range(7) if j != i]
        hardest += max(cb) + max(ca)
        total += sum(cb) + sum(ca)
    assert contrastive_loss(a, b, margin=0.3).item() == pytest.approx(hardest, rel=1e-5)
    assert contrastive_loss(a, b, margin=0.3, max_violation=False).item() == pytest.approx(total, rel=1e-5)


def test_contrastive_loss_duplicates_count_as_negatives():
    # Row 1 repeats row 0 (the same caption twice in a c2c batch): as in VSE++, only the diagonal
    # is masked, so each duplicate is a negative scoring as high as the positive: cost = margin.
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    assert contrastive_loss(a, a.clone(), margin=0.2).item() == pytest.approx(4 * 0.2)


def test_contrastive_loss_rejects_misaligned_inputs():
    with pytest.raises(ValueError, match="same shape"):
        contrastive_loss(torch.zeros(3, 2), torch.zeros(4, 2), margin=0.2)


# --------------------------------------------------------------------------------------------
# RankingModel


def _model(seed=0, vocab=20):
    torch.manual_seed(seed)
    return RankingModel(vocab, embedding_dim=6, joint_dim=8, image_dim=10)


def test_model_init_is_deterministic_and_pad_row_is_zero():
    m1, m2, m3 = _model(0), _model(0), _model(1)
    for (k, v1), v2 in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(v1, v2), k
    assert not torch.equal(m1.embedding.weight, m3.embedding.weight)
    assert torch.count_nonzero(m1.embedding.weight[0]) == 0
    assert torch.count_nonzero(m1.image_projection.bias) == 0
    assert m1.config() == {"vocab_size": 20, "embedding_dim": 6, "joint_dim": 8, "image_dim": 10,
                           "image_normalization": "raw", "similarity": "cosine",
                           "text_encoder": "gru", "text_options": {}}


def test_caption_encoding_is_final_state_of_the_real_length():
    model = _model()
    table = TokenTable.from_lists([[3, 4, 5], [7, 8, 9, 10, 11, 12], [2]])
    tokens, lengths = table.batch(np.arange(3))
    assert tokens.shape == (3, 6) and lengths.tolist() == [3, 6, 1]
    together = model.encode_captions(tokens, lengths)
    assert torch.allclose(together.norm(dim=1), torch.ones(3), atol=1e-6)
    for i, seq in enumerate([[3, 4, 5], [7, 8, 9, 10, 11, 12], [2]]):
        # Alone, unpadded, through the GRU by hand: the last output is the final state.
        out, _ = model.gru(model.embedding(torch.tensor([seq])))
        expected = torch.nn.functional.normalize(out[0, -1], dim=0)
        assert torch.allclose(together[i], expected, atol=1e-6)


def test_image_encoding_accepts_float16_and_is_unit_norm():
    model = _model()
    feats = torch.randn(4, 10, generator=torch.Generator().manual_seed(1)).half()
    emb = model.encode_images(feats)
    assert emb.dtype == torch.float32 and emb.shape == (4, 8)
    assert torch.allclose(emb.norm(dim=1), torch.ones(4), atol=1e-6)


# --------------------------------------------------------------------------------------------
# Tokens, caption sets, c2c pairs


def test_paper_002_branches_by_hand(tmp_path):
    """``image_layers: 2`` and ``text_projection`` (paper 002's Embedding Network): the image branch
    is layer, ReLU, layer; the text branch the GRU's final state through one more layer; both
    written out here from the model's weights. Parameters: image 6·5 + 5 = 35 and 5·4 + 4 = 24 (a
    hidden width of 5), embedding 5·3 = 15, GRU 108, text layer 4·4 + 4 = 20: 202 (the one-layer
    model: 28 + 15 + 108 = 151); a checkpoint's config rebuilds the branches."""
    from pseudopairs.model import checkpoints
    from pseudopairs.model.text_encoders import parameter_counts

    plain = RankingModel(5, embedding_dim=3, joint_dim=4, image_dim=6)
    torch.manual_seed(0)
    model = RankingModel(5, embedding_dim=3, joint_dim=4, image_dim=6, image_layers=2, image_hidden=5,
                         text_projection=True)
    assert parameter_counts(plain)["trainable"] == 151
    assert parameter_counts(model)["trainable"] == 35 + 24 + 15 + 108 + 20 == 202
    features = torch.randn(3, 6)
    hidden = torch.relu(features @ model.image_hidden_layer.weight.t() + model.image_hidden_layer.bias)
    image = hidden @ model.image_projection.weight.t() + model.image_projection.bias
    assert torch.allclose(model.encode_images(features), torch.nn.functional.normalize(image, dim=1), atol=1e-6)
    tokens, lengths = torch.tensor([[1, 2, 3], [4, 0, 0]]), torch.tensor([3, 1])
    _, final = model.gru(model.embedding(tokens[:1]))              # the unpadded first caption
    text = model.text_projection(final[-1])
    assert torch.allclose(model.encode_captions(tokens, lengths)[:1], text / text.norm(dim=1, keepdim=True),
                          atol=1e-6)
    assert model.config()["image_layers"] == 2 and model.config()["text_projection"] is True
    assert "image_layers" not in plain.config()                      # papers 000/004's models as before
    path = tmp_path / "ckpt.pt"
    torch.save({"format": checkpoints.CHECKPOINT_FORMAT, "model_state": model.state_dict(), **model.config()}, path)
    loaded, _ = checkpoints.load_model(path)
    assert torch.allclose(loaded.encode_images(features), model.encode_images(features))
    with pytest.raises(ValueError, match="image_layers must be 1 or 2, got 3"):
        RankingModel(5, embedding_dim=3, joint_dim=4, image_dim=6, image_layers=3)


def test_token_table_pads_with_zero_and_keeps_lengths():
    table = TokenTable.from_lists([[5, 6], [], [7, 8, 9]])
    tokens, lengths = table.batch(np.array([2, 0, 1]))
    assert tokens.tolist() == [[7, 8, 9], [5, 6, 0], [0, 0, 0]]
    assert lengths.tolist() == [3, 2, 1]   # the empty caption becomes one PAD step
    assert table.sequence(2) == [7, 8, 9]


def test_c2c_pairs_by_hand():
    pairs = c2c_pairs(a_image_ids=["x", "x", "y", "z"], b_image_ids=["y", "x", "x", "x", "w"])
    assert pairs.tolist() == [[0, 1], [0, 2], [0, 3], [1, 1], [1, 2], [1, 3], [2, 0]]


def test_c2c_pairs_five_by_five_gives_25_per_image():
    a = [img for img in ("p", "q") for _ in range(5)]
    b = [img for img in ("q", "p") for _ in range(5)]
    pairs = c2c_pairs(a_image_ids=a, b_image_ids=b)
    assert len(pairs) == 50
    assert all(a[i] == b[j] for i, j in pairs)
    assert len({(i, j) for i, j in pairs}) == 50
    assert c2c_pairs(a_image_ids=["u"], b_image_ids=["v"]).shape == (0, 2)


def _write_tiny_corpus(tmp_path):
    rows = []
    for img, words in (("i0", "red ball"), ("i1", "blue box"), ("i2", "green cup")):
        for k in range(2):
            rows.append(("m", "train", img, "en", k, words, f"a {words}"))
            rows.append(("m", "train", img, "de", k, words, f"ein {words} {k}"))
    frame = pd.DataFrame(rows, columns=["dataset", "split", "image_id", "lang", "caption_idx", "raw", "text"])
    frame.to_parquet(tmp_path / "captions.parquet", index=False)
    # Image i1 has no features (skipped as unreadable).
    save_features(tmp_path / "feats.npz", image_ids=["i2", "i0"],
                  features=np.arange(8, dtype=np.float16).reshape(2, 4))
    (tmp_path / "feats.skipped.tsv").write_text("image_id\tpath\treason\ni1\ti1.png\tcannot decode\n")
    return build_vocabulary(frame["text"], min_count=1)


def test_caption_set_drops_captions_without_features(tmp_path, caplog):
    vocab = _write_tiny_corpus(tmp_path)
    with caplog.at_level(logging.WARNING):
        cs = load_caption_set(name="m.en", captions=tmp_path / "captions.parquet", lang="en",
                              vocab=vocab, features=tmp_path / "feats.npz")
    assert "dropped 2 of 6 en captions of 1 images skipped by the feature step" in caplog.text
    assert cs.image_ids.tolist() == ["i0", "i0", "i2", "i2"]
    assert cs.feature_rows.tolist() == [1, 1, 0, 0]
    assert cs.tokens.sequence(0) == vocab.encode("a red ball")
    batch = C2IData(cs).batch(np.array([2, 0]))
    assert batch.features.dtype == torch.float32
    assert batch.features.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert batch.tokens.tolist() == [vocab.encode("a green cup"), vocab.encode("a red ball")]
    with pytest.raises(ValueError, match="no captions in language 'fr'"):
        load_caption_set(name="m.fr", captions=tmp_path / "captions.parquet", lang="fr", vocab=vocab)


def test_c2c_data_pairs_two_languages_of_the_same_images(tmp_path):
    vocab = _write_tiny_corpus(tmp_path)
    kw = dict(captions=tmp_path / "captions.parquet", vocab=vocab, features=tmp_path / "feats.npz")
    en = load_caption_set(name="m.en", lang="en", **kw)
    de = load_caption_set(name="m.de", lang="de", **kw)
    c2c = C2CData("m.en+m.de", en, de)
    assert len(c2c) == 2 * 2 * 2     # two images with features, 2 En × 2 De captions each
    batch = c2c.batch(np.arange(len(c2c)))
    for ta, tb in zip(batch.tokens_a.tolist(), batch.tokens_b.tolist()):
        words_a = [vocab.words[t] for t in ta if t]
        words_b = [vocab.words[t] for t in tb if t]
        assert words_a[1:] == words_b[1:3]  # "a red ball" ↔ "ein red ball k": same image


# --------------------------------------------------------------------------------------------
# BatchStream and TaskSampler


def test_batch_stream_covers_every_item_once_per_pass_and_reshuffles():
    stream = BatchStream(12, 4, rng=np.random.default_rng(0))
    passes = [np.concatenate([stream.next() for _ in range(3)]) for _ in range(4)]
    for p in passes:
        assert sorted(p.tolist()) == list(range(12))
    assert len({tuple(p.tolist()) for p in passes}) == 4
    assert stream.epoch == 3


def test_batch_stream_drops_the_partial_batch():
    stream = BatchStream(11, 4, rng=np.random.default_rng(1))
    left_out = set()
    for _ in range(30):
        first, second = stream.next(), stream.next()
        both = np.concatenate([first, second])
        assert len(first) == len(second) == 4 and len(set(both.tolist())) == 8
        left_out |= set(range(11)) - set(both.tolist())
    assert left_out == set(range(11))       # which items wait is random from pass to pass
    small = BatchStream(3, 8, rng=np.random.default_rng(2))
    assert sorted(small.next().tolist()) == [0, 1, 2]


def test_batch_stream_state_round_trip():
    stream = BatchStream(10, 3, rng=np.random.default_rng(5))
    for _ in range(4):
        stream.next()
    buffer = io.BytesIO()
    torch.save(stream.state_dict(), buffer)
    expected = [stream.next().tolist() for _ in range(9)]
    other = BatchStream(10, 3, rng=np.random.default_rng(99))
    buffer.seek(0)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    assert [other.next().tolist() for _ in range(9)] == expected
    with pytest.raises(ValueError, match="10 items"):
        BatchStream(11, 3, rng=np.random.default_rng(0)).load_state_dict(stream.state_dict())


def test_task_sampler_proportions():
    sampler = TaskSampler(c2i=["a", "b", "c"], c2c=["x", "y"], c2c_probability=0.3,
                          rng=np.random.default_rng(0))
    draws = [sampler.draw() for _ in range(30000)]
    counts = pd.Series([name for _, name in draws]).value_counts() / len(draws)
    tasks = pd.Series([task for task, _ in draws]).value_counts() / len(draws)
    assert tasks["c2c"] == pytest.approx(0.3, abs=0.015)
    for name in "xy":
        assert counts[name] == pytest.approx(0.15, abs=0.012)
    for name in "abc":
        assert counts[name] == pytest.approx(0.7 / 3, abs=0.012)
    assert all(task == "c2c" for task, name in draws if name in "xy")
    only_c2i = TaskSampler(c2i=["a"], c2c=[], c2c_probability=0.5, rng=np.random.default_rng(0))
    assert {only_c2i.draw() for _ in range(100)} == {("c2i", "a")}


def test_task_sampler_state_round_trip_and_checks():
    sampler = TaskSampler(c2i=["a", "b"], c2c=["x"], c2c_probability=0.5, rng=np.random.default_rng(3))
    sampler.draw()
    state = sampler.state_dict()
    expected = [sampler.draw() for _ in range(50)]
    other = TaskSampler(c2i=["a", "b"], c2c=["x"], c2c_probability=0.5, rng=np.random.default_rng(4))
    other.load_state_dict(state)
    assert [other.draw() for _ in range(50)] == expected
    with pytest.raises(ValueError, match="at least one c2i"):
        TaskSampler(c2i=[], c2c=["x"], c2c_probability=0.5, rng=np.random.default_rng(0))


# --------------------------------------------------------------------------------------------
# The joint objective (paper 003): its loss and its batches


def test_joint_loss_is_the_sum_of_the_pairwise_losses_by_hand():
    from pseudopairs.model.losses import joint_loss

    # Images = _hand_case's a, English = its b (loss .84 by hand, max violation, margin .2);
    # German exists for images 0 and 2 only: (1, 0, 0) and (0.6, 0.8, 0) — image 0 and image 2
    # exactly, so image–German costs max(0, .2 − 1 + s_02) with s_02 = .6 → 0 both ways: 0.
    # English–German on images 0, 2: en0 = (1, 0, 0), en2 = (0, .6, .8) against de0, de2:
    # s = [[1, .6], [0, .48]]; caption cost en2 vs de0: .2 − .48 + 0 → 0; en0 vs de2: .2 − 1 + .6
    # → 0; de2 vs en0 (s_02 = .6): .2 − .48 + .6 = .32; de0 vs en2 (s_10 = 0): 0 → .32.
    images, english = _hand_case()
    german = torch.tensor([[1.0, 0, 0], [0.6, 0.8, 0]])
    sources = {"image": (images, np.arange(3)), "en": (english, np.arange(3)),
               "de": (german, np.array([0, 2]))}
    pairs = [("image", "en", "cosine"), ("image", "de", "cosine"), ("en", "de", "cosine")]
    sizes: list = []
    loss = joint_loss(sources, pairs, margin=0.2, sizes=sizes)
    assert loss.item() == pytest.approx(0.84 + 0.0 + 0.32, abs=1e-6)
    assert sizes == [3, 2, 2]
    separately = sum(contrastive_loss(a[rows_a], b[rows_b], margin=0.2).item() for a, b, rows_a, rows_b in [
        (images, english, [0, 1, 2], [0, 1, 2]), (images, german, [0, 2], [0, 1]),
        (english, german, [0, 2], [0, 1])])
    assert loss.item() == pytest.approx(separately, abs=1e-6)
    # the sum over negatives and the order similarity: still the sum of the pairs' losses
    for options in ({"max_violation": False}, {}):
        sim = "order" if not options else "cosine"
        pairs = [("image", "en", sim), ("image", "de", sim), ("en", "de", "cosine")]
        expected = (contrastive_loss(images, english, margin=0.2, similarity=sim, **options)
                    + contrastive_loss(images[[0, 2]], german, margin=0.2, similarity=sim, **options)
                    + contrastive_loss(english[[0, 2]], german, margin=0.2, **options))
        got = joint_loss(sources, pairs, margin=0.2, **options)
        assert got.item() == pytest.approx(expected.item(), abs=1e-6)
    # a pair with fewer than two shared items has no negative: skipped; nothing at all → 0
    one = {"image": (images, np.arange(3)), "de": (german[:1], np.array([1]))}
    assert joint_loss(one, [("image", "de", "cosine")], margin=0.2).item() == 0.0


def _joint_data(tmp_path):
    """En and De caption sets over three images with features (i1 has none: its captions are
    dropped); German lacks image i2."""
    vocab = _write_tiny_corpus(tmp_path)
    frame = pd.read_parquet(tmp_path / "captions.parquet")
    frame = frame[~((frame["lang"] == "de") & (frame["image_id"] == "i2"))]
    frame.to_parquet(tmp_path / "captions.parquet", index=False)
    save_features(tmp_path / "feats.npz", image_ids=["i2", "i0", "i1"],
                  features=np.arange(12, dtype=np.float16).reshape(3, 4))
    (tmp_path / "feats.skipped.tsv").unlink()
    kw = dict(captions=tmp_path / "captions.parquet", vocab=vocab, features=tmp_path / "feats.npz",
              feature_cache={})
    en = load_caption_set(name="m.en", lang="en", **kw)
    de = load_caption_set(name="m.de", lang="de", **kw)
    return vocab, en, de


def test_joint_groups_and_batches(tmp_path):
    from pseudopairs.model.joint import JointSampler, joint_groups

    vocab, en, de = _joint_data(tmp_path)
    c2i = [C2IData(en), C2IData(de)]
    (group,) = joint_groups(c2i, [C2CData("m.en+m.de", en, de)])
    assert group.name == "m.en+m.de" and group.c2c == [("m.en", "m.de", "m.en+m.de")]
    assert group.images.tolist() == [0, 1, 2]             # feature rows of i2, i0, i1
    batch = group.batch(np.array([2, 0, 1]), np.random.default_rng(0))
    assert batch.features.tolist() == [[8, 9, 10, 11], [0, 1, 2, 3], [4, 5, 6, 7]]
    tokens, lengths, rows = batch.captions["m.en"]
    assert rows.tolist() == [0, 1, 2]                     # every image has English
    words = {"i0": "red ball", "i1": "blue box", "i2": "green cup"}
    for row, image in zip(rows, ["i1", "i2", "i0"]):
        assert [vocab.words[t] for t in tokens[row].tolist() if t] == ["a", *words[image].split()]
    tokens, _, rows = batch.captions["m.de"]
    assert rows.tolist() == [0, 2]                        # no German for i2 (position 1)
    # deterministic and resumable: a restored sampler draws the same batches
    sampler = JointSampler([group], batch_size=2, seed=3)
    sampler.next()
    state = sampler.state_dict()
    ahead = [sampler.next()[1] for _ in range(4)]
    again = JointSampler([group], batch_size=2, seed=3)
    again.load_state_dict(state)
    for a, b in zip(ahead, [again.next()[1] for _ in range(4)]):
        assert torch.equal(a.features, b.features)
        assert all(torch.equal(a.captions[k][0], b.captions[k][0]) for k in a.captions)


def test_joint_rejects_c2c_over_other_images(tmp_path):
    from pseudopairs.model.joint import joint_groups

    vocab, en, de = _joint_data(tmp_path)
    with pytest.raises(ValueError, match="c2c data set m.en\\+m.de pairs captions that are not both c2i"):
        joint_groups([C2IData(en)], [C2CData("m.en+m.de", en, de)])
