"""The ``smalr`` training objective (paper 002 §3.2–3.3): its terms on hand-made encodings
against hand-computed values and the smalr library, and tiny runs (with the gru and the hem text
encoder) that train, are deterministic and resume to the same weights."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import run_settings
import torch

import pseudopairs.model.smalr_objective as smalr_objective
from pseudopairs.model.objectives import OBJECTIVES
from pseudopairs.model.smalr_objective import Encoded, SmalrHeads, smalr_terms, total_loss
from pseudopairs.core.settings import SettingsError
from pseudopairs.smalr.constraints import image_sentence_loss
from pseudopairs.smalr.mclm import mclm_all_pairs
from test_text_encoders import _hem_world
from test_training import SETTINGS, _count_updates, _Killed, _run, _same_weights, _weights, _world

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return _world(tmp_path_factory.mktemp("world"))


def _identity_heads(dim=2):
    torch.manual_seed(0)
    heads = SmalrHeads(joint_dim=dim, embedding_dim=dim, languages=["de", "en"], hidden=None)
    with torch.no_grad():
        for head in (heads.sentence, heads.average):
            head.layer.weight.copy_(torch.eye(2 * dim))
            head.layer.bias.zero_()
    return heads


def _t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def _two_sentences():
    """Two images; image 0 has an En and a De caption, image 1 an En caption only."""
    en = Encoded(lang="en", rows=np.array([0, 1]),
                 full=_t([[1, 0], [0, 1]]), masked=_t([[0, 1], [0, 1]]),
                 average=_t([[1, 0], [1, 1]]), average_masked=_t([[1, 0], [1, 0]]))
    de = Encoded(lang="de", rows=np.array([0]),
                 full=_t([[1, 0]]), masked=_t([[1, 0]]),
                 average=_t([[0, 1]]), average_masked=_t([[1, 0]]))
    return {"m30k.en": en, "m30k.de": de}


def test_mclm_term_on_two_sentences_by_hand_and_as_the_library():
    """With identity heads the prediction is the masked representation itself. Image 0 is the one
    image with both languages: sentence level En 2 − 2·cos((0,1),(1,0)) = 2, De 0; average level
    De predicts (1,0) for (0,1): 2, En 0 → 4 (the mean over the one row)."""
    encoded = _two_sentences()
    heads = _identity_heads()
    images = _t([[1, 0], [0, 1]])
    terms = smalr_terms(images, encoded, heads, margin=0.2, top_k=10)
    assert terms["mclm"].item() == pytest.approx(4.0)
    en, de = encoded["m30k.en"], encoded["m30k.de"]
    library = (mclm_all_pairs(heads.sentence, {"en": en.full[:1], "de": de.full},
                              {"en": en.masked[:1], "de": de.masked})
               + mclm_all_pairs(heads.average, {"en": en.average[:1], "de": de.average},
                                {"en": en.average_masked[:1], "de": de.average_masked}))
    assert terms["mclm"].item() == pytest.approx(library.item())


def test_image_sentence_term_counts_the_masked_captions_as_positives():
    encoded = _two_sentences()
    images = _t([[1, 0], [0, 1]])
    terms = smalr_terms(images, encoded, _identity_heads(), margin=0.2, top_k=10)
    # columns: En full (img 0, 1), De full (img 0), En masked (img 0, 1), De masked (img 0)
    columns = _t([[1, 0], [0, 1], [1, 0], [0, 1], [0, 1], [1, 0]])
    positive = torch.tensor([[1, 0, 1, 1, 0, 1], [0, 1, 0, 0, 1, 0]], dtype=torch.bool)
    expected = image_sentence_loss(images, columns, positive, margin=0.2, top_k=10)
    assert terms["image_sentence"].item() == pytest.approx(expected.item())
    # by hand (cosines 0 or 1; margin 0.2): the one masked caption unlike its image is column 3
    # (image 0's masked En, (0,1)). Images as anchors: image 0's pair with it has hinge
    # 0.2 − 0 + 0 = 0.2 against both negatives; image 1's two pairs each see column 3 as a
    # negative scoring 1 (0.2 − 1 + 1 = 0.2) among 4 negatives → 0.05; mean over 6 pairs
    # (0.2 + 0.05 + 0.05) / 6 = 0.05. Sentences as anchors: column 3 scores 0 with its image and
    # 1 with the other (1.2), every other column 0 → 1.2 / 6 = 0.2. Eq. (3): 0.05 + 1.5 · 0.2.
    assert terms["image_sentence"].item() == pytest.approx(0.35)


def _neighbours():
    """:func:`_two_sentences` with the full representations of image 0's En caption, image 1's
    En caption and image 0's De caption (1,0), (1,0), (1,1), so that both of the neighbourhood
    term's triplet losses are non-zero and differ from each other and from those of the masked
    representations."""
    encoded = _two_sentences()
    encoded["m30k.en"].full = _t([[1, 0], [1, 0]])
    encoded["m30k.de"].full = _t([[1, 1]])
    return encoded


def test_neighbourhood_term_on_two_sentences_by_hand():
    """Sentences in batch order: En (image 0), En (image 1), De (image 0); the one positive pair
    is (En 0, De 0), both ways, and the En caption of image 1 the one negative of each.
    Average representations (1,0), (1,1), (0,1): cos(En 0, De 0) = 0, each with the negative
    1/√2 → both anchors' hinge 0.2 − 0 + 1/√2. Full representations (1,0), (1,0), (1,1):
    cos(En 0, De 0) = 1/√2; En 0 anchors against a negative at 1 (0.2 − 1/√2 + 1), De 0 against
    one at 1/√2 (0.2) → mean 0.2 + (1 − 1/√2)/2. The term is their sum."""
    r = 1 / np.sqrt(2)
    average, full = 0.2 + r, 0.2 + (1 - r) / 2
    assert average + full == pytest.approx(1.25355, abs=1e-5)
    terms = smalr_terms(_t([[1, 0], [0, 1]]), _neighbours(), _identity_heads(), margin=0.2, top_k=10)
    assert terms["neighbourhood"].item() == pytest.approx(average + full)


def test_language_term_on_two_languages_by_hand():
    """The classifier (one linear layer; languages in order de, en) set to logits de = x₀,
    en = 2·x₁ on the average representations (1,0) En, (1,1) En, (0,1) De: cross-entropies
    log(1 + e), log(1 + e⁻¹), log(1 + e²), their mean the term. Behind the gradient reversal the
    representations get minus the cross-entropy's gradient."""
    heads = _identity_heads()
    with torch.no_grad():
        heads.classifier.layers.weight.copy_(_t([[1, 0], [0, 2]]))
        heads.classifier.layers.bias.zero_()
    encoded = _neighbours()
    for e in encoded.values():
        e.average.requires_grad_(True)
    terms = smalr_terms(_t([[1, 0], [0, 1]]), encoded, heads, margin=0.2, top_k=10)
    e = np.e
    want = (np.log(1 + e) + np.log(1 + 1 / e) + np.log(1 + e ** 2)) / 3
    assert want == pytest.approx(1.25115, abs=1e-5)
    assert terms["language"].item() == pytest.approx(want)
    terms["language"].backward()
    universal = torch.cat([encoded["m30k.en"].average, encoded["m30k.de"].average]).detach().requires_grad_(True)
    logits = universal @ _t([[1, 0], [0, 2]]).t()
    torch.nn.functional.cross_entropy(logits, torch.tensor([1, 1, 0])).backward()
    torch.testing.assert_close(encoded["m30k.en"].average.grad, -universal.grad[:2])
    torch.testing.assert_close(encoded["m30k.de"].average.grad, -universal.grad[2:])


def training_settings(**smalr):
    """The training section of test_training's runs with the smalr objective's ``smalr`` keys."""
    from pseudopairs.model.job import RunSettings

    return RunSettings.from_dict(run_settings({**SETTINGS, "objective": "smalr", **smalr})).training


def test_total_loss_is_eq4_with_the_papers_weights():
    terms = {"image_sentence": torch.tensor(1.0), "neighbourhood": torch.tensor(2.0),
             "language": torch.tensor(3.0), "mclm": torch.tensor(4.0)}
    settings = training_settings(smalr_neighbourhood_weight=1e-4, smalr_language_weight=1e-6,
                                 smalr_mclm_weight=5e-2)
    assert total_loss(terms, settings).item() == pytest.approx(1 + 2e-4 + 3e-6 + 0.2)


def test_one_language_has_no_classifier_and_no_mclm():
    encoded = {"m30k.en": _two_sentences()["m30k.en"]}
    heads = SmalrHeads(joint_dim=2, embedding_dim=2, languages=["en"], hidden=None)
    terms = smalr_terms(_t([[1, 0], [0, 1]]), encoded, heads, margin=0.2, top_k=10)
    assert heads.classifier is None
    assert terms["language"].item() == 0.0 and terms["mclm"].item() == 0.0


def test_smalr_is_registered_and_needs_the_cosine(world, tmp_path):
    assert "smalr" in OBJECTIVES.names()
    with pytest.raises(SettingsError, match="training.similarity: objective smalr scores with the cosine"):
        _run(world, tmp_path, objective="smalr", similarity="order")


def _count_smalr_updates(monkeypatch, *, fail_at=None):
    return _count_updates(monkeypatch, fail_at=fail_at, module=smalr_objective, name="smalr_update")


def test_a_smalr_run_learns_logs_its_task_and_resumes_to_the_same_weights(world, tmp_path, monkeypatch):
    summary = _run(world, tmp_path / "a", objective="smalr", max_updates=40)
    log = pd.read_csv(tmp_path / "a" / "train_log.csv")
    assert set(log["task"]) == {"smalr"} and set(log["dataset"]) == {"m30k.en+m30k.de"}
    assert np.isfinite(log["loss"]).all() and (log["loss"] > 0).all()
    assert log["loss"].iloc[-10:].mean() < log["loss"].iloc[:10].mean()
    assert summary["best_score"] > 0
    _count_smalr_updates(monkeypatch, fail_at=25)
    with pytest.raises(_Killed):
        _run(world, tmp_path / "resumed", objective="smalr", max_updates=40)
    calls = _count_smalr_updates(monkeypatch)
    _run(world, tmp_path / "resumed", objective="smalr", max_updates=40)
    assert calls["n"] == 20                   # updates 21..40: heads, Adam, masks restored
    assert _same_weights(_weights(tmp_path / "a"), _weights(tmp_path / "resumed"))
    assert ((tmp_path / "a" / "train_log.csv").read_text()
            == (tmp_path / "resumed" / "train_log.csv").read_text())


def test_smalr_with_the_hem_text_encoder_trains(tmp_path):
    """002's SMALR: the hybrid embedding under the smalr objective."""
    from pseudopairs.model import training
    spec, vocab, weight = _hem_world(tmp_path)
    a = training.train(spec=spec, settings=run_settings({**SETTINGS, "text_encoder": "hem", "objective": "smalr",
                                            "max_updates": 20}), out_dir=tmp_path / "a", seed=1)
    b = training.train(spec=spec, settings=run_settings({**SETTINGS, "text_encoder": "hem", "objective": "smalr",
                                            "max_updates": 20}), out_dir=tmp_path / "b", seed=1)
    assert a["best_score"] == b["best_score"]
    assert _same_weights(_weights(tmp_path / "a"), _weights(tmp_path / "b"))


def test_mclm_targets_get_no_gradient_when_detached():
    """smalr_mclm_detach: the unmasked representations are targets only, so MCLM cannot lower its
    loss by making every representation alike; without it they get the loss's gradient."""
    for detach in (True, False):
        encoded = _two_sentences()
        for e in encoded.values():
            e.full.requires_grad_(True)
            e.average.requires_grad_(True)
        terms = smalr_terms(_t([[1, 0], [0, 1]]), encoded, _identity_heads(), margin=0.2, top_k=10,
                            detach_targets=detach)
        assert terms["mclm"].item() == pytest.approx(4.0)  # the same value either way
        terms["mclm"].backward()
        full_grad = encoded["m30k.en"].full.grad
        assert (full_grad is None or not full_grad.abs().sum().item()) == detach


# ---------------------------------------------------------------------------------------------
# The masked sentences belong to MCLM (002 §3.3, Fig. 2); HEM and LA have none, and the
# heads are trained but not kept (002 §5: parameters during training vs at test time)


def test_without_mclm_the_masked_captions_are_no_positives():
    """002's HEM "does not include MCLM": Eq. (3) on the captions alone. On _two_sentences every
    caption has cosine 1 with its image and 0 with the other, so no hinge is active: 0 (against
    0.35 with the masked captions as positives, above); changing only the masked inputs changes
    nothing."""
    encoded = _two_sentences()
    images = _t([[1, 0], [0, 1]])
    no_mclm = SmalrHeads(joint_dim=2, embedding_dim=2, languages=["de", "en"], hidden=None, mclm=False)
    terms = smalr_terms(images, encoded, no_mclm, margin=0.2, top_k=10, masked_positives=False)
    assert terms["image_sentence"].item() == pytest.approx(0.0)
    assert terms["mclm"].item() == 0.0 and no_mclm.sentence is None and no_mclm.average is None
    for e in encoded.values():
        e.masked, e.average_masked = -e.masked, None
    again = smalr_terms(images, encoded, no_mclm, margin=0.2, top_k=10, masked_positives=False)
    assert all(again[k].item() == terms[k].item() for k in terms)
    for e in encoded.values():
        e.masked = None                     # as encode_batch leaves them without masking
    with pytest.raises(ValueError, match="masked positives need the masked captions"):
        smalr_terms(images, encoded, no_mclm, margin=0.2, top_k=10, masked_positives=True)


@pytest.mark.parametrize("weight, chosen, expected", [
    (5e-2, None, True),      # SMALR: MCLM on, its masked sentences are positives
    (0.0, None, False),      # HEM, LA: no MCLM, no masked sentences
    (0.0, True, True),       # the other reading: masking as an augmentation of its own
    (5e-2, False, False)])
def test_masked_positives_follow_mclm_unless_chosen(weight, chosen, expected):
    settings = training_settings(smalr_mclm_weight=weight, smalr_masked_positives=chosen)
    assert smalr_objective.masked_positives(settings) is expected
    assert smalr_objective.mclm_on(settings) is (weight > 0)


def test_the_training_only_modules_counted_by_hand():
    """The demo's sizes (joint 128, embedding 64, 4 languages, a linear classifier): the sentence
    head 256·256 + 256 = 65,792, the average head 128·128 + 128 = 16,512, the classifier 64·4 + 4
    = 260: 82,564 for SMALR, 260 for HEM and LA (no MCLM). 002's sizes (512, 512): 2 × (1024·1024
    + 1024) + 512·4 + 4 = 2,101,252."""
    def count(**kwargs):
        heads = SmalrHeads(languages=["cs", "de", "en", "fr"], hidden=None, **kwargs)
        return sum(p.numel() for p in heads.parameters())

    assert count(joint_dim=128, embedding_dim=64) == 82_564
    assert count(joint_dim=128, embedding_dim=64, mclm=False) == 260
    assert count(joint_dim=128, embedding_dim=64, mclm=False, classifier=False) == 0
    assert count(joint_dim=512, embedding_dim=512) == 2_101_252


def _evaluate(world, model_dir):
    from pseudopairs.evaluation.step import evaluate_checkpoint
    spec, _ = world
    caps, feats = spec["validation"]["captions"], spec["validation"]["features"]
    return evaluate_checkpoint(checkpoint=str(model_dir / "checkpoint.pt"),
                               vocab_path=str(model_dir / "vocab.json"),
                               spec={"captions": caps, "features": feats, "langs": ["en", "de"],
                                     "translation_captions": caps, "translation_langs": ["en", "de"]})


def test_a_hem_row_masks_nothing_and_records_its_trained_parameters(world, tmp_path, monkeypatch):
    """SETTINGS: embedding 12, joint 24, En + De. SMALR trains its heads 48·48 + 48 = 2,352 and
    24·24 + 24 = 600 and the classifier 12·2 + 2 = 26 besides the model: 2,978; HEM (MCLM weight
    0) only the classifier, 26, and never draws a mask. metrics.json: trainable = the model (kept
    at test time), training = trainable + those."""
    smalr = _run(world, tmp_path / "smalr", objective="smalr", max_updates=10)
    assert smalr["best_score"] > 0
    meta = torch.load(tmp_path / "smalr" / "checkpoint.pt", weights_only=True)
    assert meta["objective_parameters"] == 2_978
    counts = _evaluate(world, tmp_path / "smalr")["parameters"]
    assert counts["training"] == counts["trainable"] + 2_978

    def no_masking(*args, **kwargs):
        raise AssertionError("HEM must not mask")

    monkeypatch.setattr(smalr_objective, "mask_tokens", no_masking)
    _run(world, tmp_path / "hem", objective="smalr", smalr_mclm_weight=0.0, max_updates=10)
    meta = torch.load(tmp_path / "hem" / "checkpoint.pt", weights_only=True)
    assert meta["objective_parameters"] == 26
    counts = _evaluate(world, tmp_path / "hem")["parameters"]
    assert counts["training"] == counts["trainable"] + 26
    with pytest.raises(AssertionError, match="HEM must not mask"):   # the other reading masks
        _run(world, tmp_path / "hem_masked", objective="smalr", smalr_mclm_weight=0.0,
             smalr_masked_positives=True, max_updates=10)
    # the sampled objective has no modules of its own
    _run(world, tmp_path / "gru", max_updates=10)
    assert torch.load(tmp_path / "gru" / "checkpoint.pt", weights_only=True)["objective_parameters"] == 0
