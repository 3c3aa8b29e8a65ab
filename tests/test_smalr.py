"""SMALR's components (paper 002; a first step): each against a case worked out by hand in
the comments — the triplet loss, HEM's vocabulary split, PCA, hard assignment and embedding rows,
MCLM's masking and loss, MULE's constraints (gradient reversal), CLC-A / CLC-C, and the FastText
vector files."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pseudopairs.smalr import paper
from pseudopairs.smalr.settings import HemSettings
from pseudopairs.smalr.hem import (PAD_ID, UNK_ID, HybridEmbedding, HybridVocabulary,
                                   LatentAssigner, assign_vocabulary, fit_pca,
                                   hybrid_parameter_count, parameter_count,
                                   per_language_parameter_count, pretraining_parameter_count,
                                   split_vocabulary)
from pseudopairs.smalr.hem_pretrain import (pretrain_latent_assignment,
                                            sentence_representations)
from pseudopairs.smalr.triplet import (bidirectional_triplet_loss, group_triplet_loss,
                                       triplet_loss_from_scores)

torch.set_num_threads(1)


# --------------------------------------------------------------------------------------------
# triplet loss (§3.1 Eq. 1)

def _four_sentences():
    # unit rows; cosines by hand: s01 = .6, s02 = .8, s03 = 0, s12 = s13 = s23 = .48
    return torch.tensor([[1.0, 0, 0], [0.6, 0.8, 0], [0.8, 0, 0.6], [0, 0.6, 0.8]])


def test_triplet_loss_top_k_by_hand():
    # groups 0, 0, 1, 2: positive pairs (0,1) and (1,0); margin .2, hinge = .2 - s_ap + s_an
    #   (0,1): negatives s02 = .8 → .4, s03 = 0 → 0      top-1: .4    top-2: (.4 + 0)/2 = .2
    #   (1,0): negatives s12 = s13 = .48 → .08 each      top-1: .08   top-2: .08
    #   sentences 2 and 3 have no positive: no triplet
    x = _four_sentences()
    groups = [0, 0, 1, 2]
    assert float(group_triplet_loss(x, groups, margin=0.2, top_k=1)) == pytest.approx(0.24)
    assert float(group_triplet_loss(x, groups, margin=0.2, top_k=2)) == pytest.approx(0.14)
    # k above the number of negatives: the mean over the negatives there are
    assert float(group_triplet_loss(x, groups, margin=0.2, top_k=50)) == pytest.approx(0.14)
    # scaling a row does not change a cosine loss
    y = x * torch.tensor([[2.0], [0.5], [3.0], [1.0]])
    assert float(group_triplet_loss(y, groups, margin=0.2, top_k=1)) == pytest.approx(0.24)


def test_triplet_loss_without_any_triplet_is_a_differentiable_zero():
    x = _four_sentences().requires_grad_()
    loss = group_triplet_loss(x, [0, 1, 2, 3], margin=0.2, top_k=3)
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.all(x.grad == 0)


def test_bidirectional_loss_weights_the_second_direction():
    # 2 images × 2 sentences, scores by hand, margin .1, positives on the diagonal
    #   images as anchors: row 0: .1 - .9 + .3 = -.5 → 0; row 1: .1 - .5 + .7 = .3 → mean .15
    #   sentences as anchors (columns): col 0: .1 - .9 + .7 = -.1 → 0; col 1: .1 - .5 + .3 = -.1
    #   → 0; so Eq. 3 = .15 + 1.5 · 0
    scores = torch.tensor([[0.9, 0.3], [0.7, 0.5]])
    eye = torch.eye(2, dtype=torch.bool)
    loss = bidirectional_triplet_loss(scores, eye, margin=0.1, top_k=1, second_weight=1.5)
    assert float(loss) == pytest.approx(0.15)
    # margin .5: images: row 0 .5-.9+.3 = -.1 → 0; row 1 .5-.5+.7 = .7 → mean .35
    #   sentences: col 0 .5-.9+.7 = .3; col 1 .5-.5+.3 = .3 → mean .3; total .35 + 1.5·.3 = .8
    loss = bidirectional_triplet_loss(scores, eye, margin=0.5, top_k=1, second_weight=1.5)
    assert float(loss) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="both a positive and a negative"):
        triplet_loss_from_scores(scores, eye, eye, margin=0.1, top_k=1)


# --------------------------------------------------------------------------------------------
# HEM (§3.1)

COUNTS = {"en": {"a": 5, "b": 3, "c": 3, "d": 1}, "de": {"x": 4, "y": 2}}


def test_frequency_threshold_picks_the_language_specific_words():
    specific, rest = split_vocabulary(COUNTS, specific_per_language=1)
    assert specific == {"de": ("x",), "en": ("a",)}
    assert rest == {"de": ("y",), "en": ("b", "c", "d")}
    # two per language: b and c tie at 3, the alphabetical first wins
    specific, rest = split_vocabulary(COUNTS, specific_per_language=2)
    assert specific == {"de": ("x", "y"), "en": ("a", "b")}
    assert rest == {"de": (), "en": ("c", "d")}
    # 0: the Language-Agnostic model, every word latent
    specific, rest = split_vocabulary(COUNTS, specific_per_language=0)
    assert specific == {"de": (), "en": ()} and rest["en"] == ("a", "b", "c", "d")
    with pytest.raises(ValueError, match="count 0"):
        split_vocabulary({"en": {"a": 0}}, specific_per_language=1)


def _hand_assigner() -> LatentAssigner:
    # 3 latent tokens over 2-d features; scores = W f + bias
    #   W = [[1, 0], [0, 1], [-1, -1]], bias = [0, .5, -1]
    #   b = (1, 0):  ( 1, .5, -2) → 0      c = (0, 1):  (0, 1.5, -2) → 1
    #   d = (1, 1):  ( 1, 1.5, -3) → 1     y = (-1, 0): (-1, .5,  0) → 1
    #   token 2 is never the argmax: dropped, tokens 0, 1 kept in order
    assigner = LatentAssigner(2, 3)
    with torch.no_grad():
        assigner.scorer.weight.copy_(torch.tensor([[1.0, 0], [0, 1], [-1, -1]]))
        assigner.scorer.bias.copy_(torch.tensor([0.0, 0.5, -1.0]))
        assigner.latent.copy_(torch.tensor([[10.0, 0], [0, 20], [7, 7]]))
    return assigner


FEATURES = {"b": [1.0, 0], "c": [0.0, 1], "d": [1.0, 1], "y": [-1.0, 0],
            "a": [0.1, 0.2], "x": [0.5, 0.5]}


def _hand_vocabulary():
    specific, rest = split_vocabulary(COUNTS, specific_per_language=1)
    rest_features = {lang: (words, torch.tensor([FEATURES[w] for w in words]))
                     for lang, words in rest.items()}
    return specific, assign_vocabulary(specific, rest_features, _hand_assigner())


def test_hard_assignment_of_a_tiny_vocabulary_by_hand():
    specific, (vocab, kept) = _hand_vocabulary()
    assert kept.tolist() == [0, 1]
    assert vocab.latent_size == 2
    assert vocab.latent == {"de": {"y": 1}, "en": {"b": 0, "c": 1, "d": 1}}
    # ids: PAD 0, UNK 1, specific de:x 2, en:a 3, latent de:y 4, en:b 5, en:c 6, en:d 7
    assert vocab.encode("en", "a b c d zz") == [3, 5, 6, 7, UNK_ID]
    assert vocab.encode("de", "x y a") == [2, 4, UNK_ID]   # "a" is an English word only
    # rows: specific ids read their own row; latent words row 2 + 2 specific + their token
    assert vocab.rows().tolist() == [0, 1, 2, 3, 5, 4, 5, 5]
    assert HybridVocabulary.from_json(vocab.to_json()) == vocab


def test_hybrid_embedding_rows_by_hand():
    specific, (vocab, kept) = _hand_vocabulary()
    latent_rows = _hand_assigner().latent.detach()[kept]            # [[10, 0], [0, 20]]
    features = {lang: torch.tensor([FEATURES[w] for w in words])
                for lang, words in specific.items()}
    embedding = HybridEmbedding.build(vocab, features, latent_rows)
    ids = torch.tensor([vocab.encode("en", "a b c d zz") + [PAD_ID],
                        vocab.encode("de", "x y") + [PAD_ID] * 4])
    expected = torch.tensor([[[0.1, 0.2], [10, 0], [0, 20], [0, 20], [0, 0], [0, 0]],
                             [[0.5, 0.5], [0, 20], [0, 0], [0, 0], [0, 0], [0, 0]]])
    assert torch.allclose(embedding(ids), expected)
    # the assignment is frozen (a buffer), the rows train: c and d share one row, so one step
    # on c alone moves d too
    assert [n for n, _ in embedding.named_buffers()] == ["row_of_id"]
    embedding(torch.tensor([vocab.id_of("en", "c")])).sum().backward()
    assert embedding.weight.grad[5].tolist() == [1.0, 1.0]
    assert embedding.weight.grad.abs().sum() == 2.0


def test_parameter_counts():
    specific, (vocab, kept) = _hand_vocabulary()
    features = {lang: torch.zeros(len(w), 2) for lang, w in specific.items()}
    embedding = HybridEmbedding.build(vocab, features, torch.zeros(2, 2), output_dim=3)
    # rows: PAD, UNK, 2 specific, 2 latent = 6 × 2 = 12; projection 2·3 + 3 = 9
    assert parameter_count(embedding) == 21 == hybrid_parameter_count(2, 2, 2, 3)
    # every word its own row: 2 + 6 words = 8 rows × 2 + 9
    assert per_language_parameter_count({"en": 4, "de": 2}, 2, 3) == 25


def test_hem_pretraining_parameters_by_hand():
    """What HEM's pretraining trains and the model does not keep: the assignment layer (latent
    size × feature dim + latent size: 002's 40,000 × 50 + 40,000 = 2,040,000) and the latent rows
    dropped as unused; the kept rows are the model's."""
    # 5 latent tokens scored from 3-d features: 5·3 + 5 = 20; 2 of 5 dropped, rows of 3: 6
    assert pretraining_parameter_count(latent_size=5, feature_dim=3, latent_dim=3, kept=3) == 26
    assert pretraining_parameter_count(latent_size=40000, feature_dim=50, latent_dim=50,
                                       kept=40000) == 2_040_000
    with pytest.raises(ValueError, match=r"kept must be in 0\.\.5, got 6"):
        pretraining_parameter_count(latent_size=5, feature_dim=3, latent_dim=3, kept=6)


def test_pca_by_hand():
    # centred points along (1, 1) (±2√2) and (1, -1) (±√2); variances 16/3 and 4/3 (n − 1 = 3);
    # each component's largest-magnitude entry positive (a tie: the first entry)
    x = np.array([[2.0, 2], [-2, -2], [1, -1], [-1, 1]]) + np.array([5.0, -3.0])
    pca = fit_pca(x, 2)
    r = 1 / math.sqrt(2)
    assert torch.allclose(pca.components, torch.tensor([[r, r], [r, -r]], dtype=torch.float64))
    assert torch.allclose(pca.explained_variance, torch.tensor([16 / 3, 4 / 3],
                                                               dtype=torch.float64))
    assert torch.allclose(pca.transform(x[:1]), torch.tensor([[2 * math.sqrt(2), 0.0]]))
    # whitened: each component over its standard deviation, 2√2 / √(16/3) = √(3/2)
    assert torch.allclose(pca.transform(x[:1], whiten=True), torch.tensor([[math.sqrt(1.5), 0.0]]))
    assert torch.allclose(pca.transform(x, whiten=True).double().var(dim=0),
                          torch.ones(2, dtype=torch.float64), atol=1e-6)
    with pytest.raises(ValueError, match="at most 2"):
        fit_pca(x, 3)


def test_exploration_draws_from_the_top_tokens_only():
    assigner = _hand_assigner()
    logits = torch.tensor([[3.0, 2.0, 1.0]]).repeat(400, 1)
    chosen = assigner.choose(logits, explore_top=2, explore_probability=0.5,
                             generator=torch.Generator().manual_seed(0))
    assert set(chosen.tolist()) == {0, 1}          # never token 2 (outside the top 2)
    assert 0.6 < (chosen == 0).float().mean() < 0.9  # 1/2 + 1/2 · 1/2 = .75 expected
    again = assigner.choose(logits, explore_top=2, explore_probability=0.5,
                            generator=torch.Generator().manual_seed(0))
    assert torch.equal(chosen, again)
    assert torch.equal(assigner.choose(logits, explore_top=2, explore_probability=0.0),
                       torch.zeros(400, dtype=torch.int64))


def test_straight_through_uses_the_hard_row_and_trains_the_scorer():
    assigner = _hand_assigner()
    features = torch.tensor([[[1.0, 0], [0.0, 1]]])           # b → token 0, c → token 1
    rep = sentence_representations(assigner, features, torch.tensor([2]))
    assert torch.allclose(rep, torch.tensor([[5.0, 10.0]]))    # mean of (10, 0) and (0, 20)
    rep.sum().backward()
    assert assigner.scorer.weight.grad.abs().sum() > 0
    soft = assigner.embed(torch.tensor([[1.0, 0]]), mode="soft")
    p = torch.softmax(torch.tensor([1.0, 0.5, -2.0]), 0)
    assert torch.allclose(soft, (p @ torch.tensor([[10.0, 0], [0, 20], [7, 7]])).unsqueeze(0))


def test_pretraining_learns_to_share_tokens_across_languages():
    # two "languages" whose word vectors differ (different spaces); images 0..3, each described
    # by one sentence per language; the triplet loss pulls the two descriptions together
    gen = torch.Generator().manual_seed(1)
    en, de = torch.randn(8, 4, generator=gen), torch.randn(8, 4, generator=gen)
    sentences, images = [], []
    for image in range(4):
        sentences += [en[[2 * image, 2 * image + 1]], de[[2 * image, 2 * image + 1]]]
        images += [image, image]
    settings = HemSettings(latent_size=8, margin=0.2, top_k=2, explore_top=2,
                           explore_probability=0.1, learning_rate=0.05, steps=60,
                           batch_images=4, sentences_per_image=2)
    result = pretrain_latent_assignment(sentences, images, settings, seed=3)
    assert np.mean(result.losses[-10:]) < np.mean(result.losses[:10])
    again = pretrain_latent_assignment(sentences, images, settings, seed=3)
    assert result.losses == again.losses                      # seeded: the same run
    with pytest.raises(ValueError, match="two images with two sentences"):
        pretrain_latent_assignment(sentences[:2], [0, 1], settings, seed=3)


# --------------------------------------------------------------------------------------------
# MCLM (§3.2, §7.4)

from pseudopairs.smalr.mclm import (IGNORE_INDEX, MCLMHead, average_representation,  # noqa: E402
                                    mask_tokens, masked_count, mclm_all_pairs, mclm_loss)


def test_masking_counts_positions_and_targets():
    # 20%, rounded half up: n = 7 → 1.4 → 1, n = 8 → 1.6 → 2, n = 13 → 2.6 → 3; none of 1 word
    assert [masked_count(n, 0.2) for n in (1, 2, 3, 5, 7, 8, 10, 13)] == [0, 1, 1, 1, 1, 2, 2, 3]
    assert masked_count(10, 0.0) == 0
    ids = torch.tensor([[5, 6, 7, 8, 9], [11, 12, 0, 0, 0], [13, 0, 0, 0, 0]])
    lengths = torch.tensor([5, 2, 1])
    batch = mask_tokens(ids, lengths, fraction=0.4, mask_id=3,
                        generator=torch.Generator().manual_seed(0))
    # 40%: 2 of 5, 1 of 2, 0 of 1
    assert batch.mask.sum(dim=1).tolist() == [2, 1, 0]
    assert torch.equal(batch.masked_ids[batch.mask], torch.full((3,), 3))
    assert torch.equal(batch.targets[batch.mask], ids[batch.mask])
    assert torch.all(batch.targets[~batch.mask] == IGNORE_INDEX)
    assert torch.equal(batch.masked_ids[~batch.mask], ids[~batch.mask])
    assert batch.kept_lengths.tolist() == [3, 1, 1]
    for row in range(3):   # the kept words, in order, are the unmasked ones
        unmasked = ids[row, : lengths[row]][~batch.mask[row, : lengths[row]]]
        assert torch.equal(batch.kept_ids[row, : batch.kept_lengths[row]], unmasked)
    again = mask_tokens(ids, lengths, fraction=0.4, mask_id=3,
                        generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.masked_ids, batch.masked_ids)


def test_average_representation_leaves_out_padding():
    emb = torch.tensor([[[1.0, 2], [3, 4], [100, 100]], [[5.0, 6], [100, 100], [100, 100]]])
    assert torch.allclose(average_representation(emb, [2, 1]), torch.tensor([[2.0, 3], [5, 6]]))


def _hand_head(weight) -> MCLMHead:
    head = MCLMHead(2)
    with torch.no_grad():
        head.layer.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
        head.layer.bias.zero_()
    return head


def test_mclm_loss_on_two_sentences_by_hand():
    # unmasked s_a = (1, 0), s_b = (0, 2); masked ŝ_a = (1, 1), ŝ_b = (0, 1); ‖n(p) − n(s)‖² =
    # 2 − 2 cos(p, s)
    s_a, s_b = torch.tensor([[1.0, 0]]), torch.tensor([[0.0, 2]])
    m_a, m_b = torch.tensor([[1.0, 1]]), torch.tensor([[0.0, 1]])
    # identity layer: p_a = (1, 1), cos with s_a = 1/√2 → 2 − √2; p_b = (0, 1) ∥ s_b → 0
    loss = mclm_loss(_hand_head(torch.eye(4)), s_a, s_b, m_a, m_b).detach()
    assert float(loss) == pytest.approx(2 - math.sqrt(2))
    # a layer that swaps the halves: each sentence is predicted from the OTHER language only:
    # p_a = ŝ_b = (0, 1) ⟂ s_a → 2; p_b = ŝ_a = (1, 1), cos with s_b = 1/√2 → 2 − √2
    swap = torch.zeros(4, 4)
    swap[0, 2] = swap[1, 3] = swap[2, 0] = swap[3, 1] = 1.0
    loss = mclm_loss(_hand_head(swap), s_a, s_b, m_a, m_b).detach()
    assert float(loss) == pytest.approx(4 - math.sqrt(2))
    # three languages: the three unique pairs, summed (de–en, de–fr, en–fr)
    head = _hand_head(torch.eye(4))
    reps = {"en": s_a, "de": s_b, "fr": m_a}
    total = mclm_all_pairs(head, reps, {"en": m_a, "de": m_b, "fr": m_a})
    with torch.no_grad():
        expected = (float(mclm_loss(head, s_b, s_a, m_b, m_a))
                    + float(mclm_loss(head, s_b, m_a, m_b, m_a))
                    + float(mclm_loss(head, s_a, m_a, m_a, m_a)))
    assert float(total.detach()) == pytest.approx(expected)


# --------------------------------------------------------------------------------------------
# MULE's constraints (§3.3)

from pseudopairs.smalr.constraints import (LanguageClassifier, gradient_reversal,  # noqa: E402
                                           image_sentence_loss, neighbourhood_loss)


def test_gradient_reversal_flips_the_sign():
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    w = torch.tensor([0.5, 1.0, -4.0])
    y = gradient_reversal(x, 0.5)
    assert torch.equal(y.detach(), x.detach())                       # identity forward
    (y * w).sum().backward()
    assert torch.allclose(x.grad, -0.5 * w)                          # d/dx = −0.5 · w
    x.grad = None
    (x * w).sum().backward()
    assert torch.allclose(x.grad, w)                                 # without it: +w


def test_language_classifier_by_hand_and_adversarial_gradient():
    clf = LanguageClassifier(2, ["en", "de"])
    with torch.no_grad():
        clf.layers.weight.copy_(torch.tensor([[1.0, 0], [0, 1]]))
        clf.layers.bias.zero_()
    # rows (2, 0) "en" and (0, 0) "de": logits (2, 0) → −log(e²/(e²+1)); (0, 0) → log 2
    x = torch.tensor([[2.0, 0], [0, 0]], requires_grad=True)
    loss = clf.loss(x, ["en", "de"])
    expected = (math.log(1 + math.exp(-2)) + math.log(2)) / 2
    assert float(loss.detach()) == pytest.approx(expected)
    loss.backward()
    # the classifier descends its loss; the input gets the reversed gradient (it ascends)
    logits = x.detach().clone().requires_grad_()
    torch.nn.functional.cross_entropy(logits @ torch.eye(2), torch.tensor([0, 1])).backward()
    assert torch.allclose(x.grad, -logits.grad)
    # ...and the classifier the cross-entropy's own gradient, (softmax − one-hot) ⊗ row, averaged:
    # row (2, 0), "en": p − y = (−q, q) with q = 1/(e² + 1); row (0, 0), "de": (½, −½), no weight
    q = 1 / (math.exp(2) + 1)
    torch.testing.assert_close(clf.layers.weight.grad, torch.tensor([[-q, 0.0], [q, 0.0]]))
    torch.testing.assert_close(clf.layers.bias.grad, torch.tensor([(0.5 - q) / 2, (q - 0.5) / 2]))


def test_neighbourhood_and_image_sentence_losses_are_the_triplet_losses():
    x = _four_sentences()
    assert float(neighbourhood_loss(x, [0, 0, 1, 2], margin=0.2, top_k=1)) == pytest.approx(0.24)
    # images = sentences 0 and 2; sentences 1 and 3; cosines by hand: i0·s1 = .6, i0·s3 = 0,
    # i1·s1 = .48, i1·s3 = .48; positives (0, 1) ... image 0 ↔ s1, image 1 ↔ s3; margin .2
    #   images as anchors: i0: .2 − .6 + 0 = −.4 → 0; i1: .2 − .48 + .48 = .2 → mean .1
    #   sentences: s1: .2 − .6 + .48 = .08; s3: .2 − .48 + 0 = −.28 → 0 → mean .04
    loss = image_sentence_loss(x[[0, 2]], x[[1, 3]], torch.eye(2, dtype=torch.bool),
                               margin=0.2, top_k=1)
    assert float(loss) == pytest.approx(0.1 + 1.5 * 0.04)


# --------------------------------------------------------------------------------------------
# CLC (§3.4)

from pseudopairs.smalr.clc import (CLCClassifier, clc_a, clc_c, eq3_loss,  # noqa: E402
                                   positives_of, train_clc_c)


def _toy_scores():
    # 3 languages × 2 queries × 2 images
    return torch.tensor([[[0.9, 0.1], [0.2, 0.4]],      # en
                         [[0.3, 0.6], [0.5, 0.7]],      # de
                         [[0.6, -0.1], [-0.4, 1.0]]])   # fr


def test_clc_a_is_the_mean_over_languages_by_hand():
    # (0.9 + 0.3 + 0.6)/3 = .6, (0.1 + 0.6 − 0.1)/3 = .2, (0.2 + 0.5 − 0.4)/3 = .1,
    # (0.4 + 0.7 + 1.0)/3 = .7
    assert torch.allclose(clc_a(_toy_scores()), torch.tensor([[0.6, 0.2], [0.1, 0.7]]))


def test_clc_c_with_hand_set_weights():
    model = CLCClassifier(3, hidden=2)
    with torch.no_grad():
        model.hidden.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 1, 1]]))
        model.output.weight.copy_(torch.tensor([[1.0, 0.5]]))
    # score = relu(en) + 0.5 · relu(de + fr)
    #   (0, 0): .9 + .5 · .9 = 1.35   (0, 1): .1 + .5 · .5 = .35
    #   (1, 0): .2 + .5 · relu(.1) = .25   (1, 1): .4 + .5 · 1.7 = 1.25
    assert torch.allclose(clc_c(model, _toy_scores()), torch.tensor([[1.35, 0.35], [0.25, 1.25]]))
    assert torch.allclose(clc_c(model, _toy_scores(), chunk=1), clc_c(model, _toy_scores()))


def test_clc_c_has_002s_parameter_count_and_starts_at_relu_clc_a_when_constant():
    assert paper.clc_c_parameters(10) == paper.CLC_PARAMETERS_TEN_LANGUAGES == 352
    assert parameter_count(CLCClassifier(10)) == 352
    constant = CLCClassifier(3, init="constant")
    assert torch.allclose(clc_c(constant, _toy_scores()), torch.relu(clc_a(_toy_scores())))
    a, b = CLCClassifier(3, seed=1), CLCClassifier(3, seed=1)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def _clc_world(seed=0, queries=24, images=12):
    # language 0 scores the right image high, language 1 is noise, language 2 is mildly right
    gen = torch.Generator().manual_seed(seed)
    query_images = torch.arange(queries) % images
    truth = positives_of(query_images, images).float()
    scores = torch.stack([truth * 0.5 + 0.5 * torch.rand(queries, images, generator=gen),
                          torch.rand(queries, images, generator=gen),
                          truth * 0.1 + torch.rand(queries, images, generator=gen)])
    return scores, query_images


def test_eq3_loss_recomputing_only_the_selected_scores_matches_the_full_loss():
    scores, query_images = _clc_world()
    positive = positives_of(query_images, scores.shape[2])
    model = CLCClassifier(3, seed=2)
    loss = eq3_loss(model, scores, positive, margin=0.1, top_k=3, chunk=5)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    full = model(scores)                                    # (Q, I) with gradient
    reference = bidirectional_triplet_loss(full.t(), positive.t(), margin=0.1, top_k=3,
                                           second_weight=1.5)
    reference.backward()
    assert float(loss.detach()) == pytest.approx(float(reference.detach()))
    assert all(torch.allclose(g, p.grad) for g, p in zip(grads, model.parameters()))
    assert all(float(g.abs().sum()) > 0 for g in grads)


def test_train_clc_c_lowers_its_loss_and_is_seeded():
    scores, query_images = _clc_world()
    run = train_clc_c(scores, query_images, margin=0.1, top_k=3, learning_rate=0.05, seed=4)
    assert len(run.losses) == 30 and run.losses[-1] < run.losses[0]
    again = train_clc_c(scores, query_images, margin=0.1, top_k=3, learning_rate=0.05, seed=4)
    assert run.losses == again.losses
    with pytest.raises(ValueError, match="image indices"):
        train_clc_c(scores, query_images + 100, margin=0.1, top_k=3, learning_rate=0.05)


# --------------------------------------------------------------------------------------------
# FastText vectors (.vec files; training with gensim, the optional extra `smalr`)

from pseudopairs.smalr.fasttext import (VecFormatError, read_vec, train_fasttext,  # noqa: E402
                                        write_vec)


def test_vec_round_trip_and_word_filter(tmp_path):
    path = tmp_path / "en.vec"
    write_vec(path, ["dog", "für", "a\u00a0b"], [[1.5, -2.0], [0.25, 3.0], [1e-8, 7.0]])
    assert path.read_text(encoding="utf-8").splitlines()[:2] == ["3 2", "dog 1.5 -2"]
    vectors = read_vec(path, dim=2)
    assert vectors.words == ["dog", "für", "a\u00a0b"]    # a no-break space stays in the word
    assert np.array_equal(vectors.vectors, np.array([[1.5, -2], [0.25, 3], [1e-8, 7]],
                                                    dtype=np.float32))
    some = read_vec(path, words={"für", "cat"})
    assert some.words == ["für"] and some.vectors.tolist() == [[0.25, 3.0]]
    import gzip
    with gzip.open(tmp_path / "en.vec.gz", "wb") as out:
        out.write(path.read_bytes())
    assert read_vec(tmp_path / "en.vec.gz").words == vectors.words


@pytest.mark.parametrize("text, where, what", [
    ("2 3\ndog 1 2 3\ncat 1 2\n", ":3:", "expected the word and 3 numbers, got 2"),
    ("2 3\ndog 1 2 3\ncat 1 x 3\n", ":3:", "'x' (a value of 'cat') is not a number"),
    ("3 3\ndog 1 2 3\ncat 1 2 3\n", ":3:", "ends after 2 vectors, the header says 3"),
    ("1 3\ndog 1 2 3\ncat 1 2 3\n", ":3:", "more vectors than the header's 1"),
    ("2 3\ndog 1 2 3\ndog 4 5 6\n", ":3:", "'dog' repeats line 2"),
    ("dog 1 2 3\n", ":1:", "expected the header 'COUNT DIM'"),
    ("1 3\ndog 1 nan 3\n", ":2:", "non-finite value 'nan'"),
])
def test_vec_reader_errors_name_the_file_and_line(tmp_path, text, where, what):
    path = tmp_path / "bad.vec"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(VecFormatError) as err:
        read_vec(path)
    assert str(err.value).startswith(f"{path}{where}") and what in str(err.value)


def test_vec_reader_names_a_non_utf8_line_a_wrong_dim_and_a_missing_file(tmp_path):
    path = tmp_path / "bad.vec"
    path.write_bytes(b"2 2\ndog 1 2\nc\xe4t 1 2\n")
    with pytest.raises(VecFormatError, match=rf"^{path}:3: not UTF-8 text"):
        read_vec(path)
    path.write_text("1 2\ndog 1 2\n", encoding="utf-8")
    with pytest.raises(VecFormatError, match=rf"^{path}:1: the vectors are 2-dimensional, "
                                             "expected 300"):
        read_vec(path, dim=300)
    with pytest.raises(FileNotFoundError, match="nowhere.vec"):
        read_vec(tmp_path / "nowhere.vec")


def test_fasttext_training_is_seeded_and_writes_vec(tmp_path):
    pytest.importorskip("gensim", reason="gensim is the optional extra `smalr`: "
                                         "pip install 'pseudopairs[smalr]'")
    sentences = [["a", "dog", "runs", "on", "the", "grass"], ["the", "dog", "sleeps"],
                 ["a", "cat", "runs"]] * 20
    first = train_fasttext(sentences, tmp_path / "a.vec", dim=8, seed=5, epochs=2)
    second = train_fasttext(sentences, tmp_path / "b.vec", dim=8, seed=5, epochs=2)
    assert (tmp_path / "a.vec").read_bytes() == (tmp_path / "b.vec").read_bytes()
    assert second.words == first.words and np.array_equal(second.vectors, first.vectors)
    assert sorted(first.words) == ["a", "cat", "dog", "grass", "on", "runs", "sleeps", "the"]
    assert first.vectors.shape == (8, 8)
    assert read_vec(tmp_path / "a.vec", dim=8).words == first.words
    # an unseen word gets a vector from its character n-grams
    asked = train_fasttext(sentences, tmp_path / "c.vec", dim=8, seed=5, epochs=2,
                           words=["dogs", "cat"])
    assert asked.words == ["dogs", "cat"] and np.abs(asked.vectors[0]).sum() > 0


# --------------------------------------------------------------------------------------------
# HEM end to end

from pseudopairs.smalr.fasttext import WordVectors  # noqa: E402
from pseudopairs.smalr.hem_build import Sentence, build_hem  # noqa: E402


def _toy_corpus():
    en = ["a dog runs", "a cat sleeps", "a dog sleeps", "the man runs", "a man sits", "the cat sits"]
    de = ["ein hund rennt", "eine katze schläft", "ein hund schläft", "der mann rennt",
          "ein mann sitzt", "die katze sitzt"]
    sentences = [Sentence(lang, image, tuple(text.split()))
                 for lang, texts in (("en", en), ("de", de)) for image, text in enumerate(texts)]
    rng = np.random.default_rng(0)
    vectors = {}
    for lang, texts in (("en", en), ("de", de)):
        words = sorted({w for t in texts for w in t.split()} - {"sits"})   # "sits": no vector
        vectors[lang] = WordVectors(words=words, vectors=rng.normal(size=(len(words), 6))
                                    .astype(np.float32))
    return sentences, vectors


def test_build_hem_end_to_end_on_a_toy_corpus():
    sentences, vectors = _toy_corpus()
    settings = HemSettings(specific_per_language=2, pca_dim=3, whiten=False, latent_size=5,
                           margin=0.2, top_k=2, explore_top=2, explore_probability=0.1,
                           learning_rate=0.05, steps=20, batch_images=4)
    built = build_hem(sentences, vectors, settings=settings, seed=1, output_dim=4)
    vocab = built.vocabulary
    # most frequent: en a (4), then cat/dog/man/runs/sleeps/the at 2 → "cat"; de ein (3), then
    # hund/katze/mann/rennt/schläft/sitzt... at 2 → "hund" ("sitzt" has a vector in German)
    assert vocab.specific == {"de": ("ein", "hund"), "en": ("a", "cat")}
    assert built.missing == {"de": [], "en": ["sits"]}
    assert UNK_ID not in vocab.encode("en", "the dog runs") + vocab.encode("de", "die katze sitzt")
    assert vocab.encode("en", "a man sits")[-1] == UNK_ID
    assert set(built.pca) == {"de", "en"} and built.pca["en"].components.shape == (3, 6)
    out = built.embedding(torch.tensor([vocab.encode("en", "a dog runs")]))
    assert out.shape == (1, 3, 4)
    assert parameter_count(built.embedding) == hybrid_parameter_count(4, vocab.latent_size, 3, 4)
    # the pretraining's assignment layer (5 tokens from 3-d rows: 5·3 + 5) and its dropped rows
    assert built.pretraining_parameters == 20 + (5 - vocab.latent_size) * 3
    again = build_hem(sentences, vectors, settings=settings, seed=1, output_dim=4)
    assert again.vocabulary == vocab and again.losses == built.losses
    assert all(torch.equal(p, q) for p, q in zip(built.embedding.parameters(),
                                                 again.embedding.parameters()))
