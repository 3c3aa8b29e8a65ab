"""The text-encoder choice of the ranking model (``model.text_encoder``: ``gru`` | ``hem``, paper
002's Hybrid Embedding Model): ids → rows by hand, parameter counts by hand, the vocabulary each
needs, a tiny HEM run through training, checkpoint and evaluation, and the setting per
experiment."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import run_settings
import torch

import pseudopairs.model.training as training
from pseudopairs.model import contract as ex
from pseudopairs.workflow.config import check_config
from pseudopairs.data.vocab import build_vocabulary
from pseudopairs.core.io import read_captions, write_json_atomic
from pseudopairs.model import checkpoints, encode
from pseudopairs.model.encoders import RankingModel
from pseudopairs.model.text_encoders import (HEM_INIT_FORMAT, TEXT_ENCODERS, language_view,
                                             load_vocabulary, parameter_counts, read_hem_init)
from pseudopairs.core.settings import SettingsError
from pseudopairs.smalr.hem import HybridVocabulary
from test_experiments import demo
from test_training import SETTINGS, _world

torch.set_num_threads(1)

# PAD 0, UNK 1, de:hund 2, en:dog 3 (specific); de:katze 4, en:cat 5, en:mouse 6 (latent)
VOCAB = HybridVocabulary(specific={"de": ("hund",), "en": ("dog",)},
                         latent={"de": {"katze": 0}, "en": {"cat": 0, "mouse": 1}}, latent_size=2)
# rows: PAD, UNK, hund, dog, latent token 0, latent token 1
ROWS = torch.tensor([[0.0, 0.0], [0.1, 0.2], [1.0, 2.0], [0.5, -1.0], [3.0, 0.0], [0.0, -3.0]])


def _hem_model():
    torch.manual_seed(0)
    model = RankingModel(len(VOCAB), embedding_dim=3, joint_dim=4, image_dim=6,
                         text_encoder="hem", text_options={"rows": 6, "row_dim": 2})
    model.set_text_embedding(weight=ROWS, row_of_id=VOCAB.rows())
    with torch.no_grad():   # 002's fully connected layer, chosen so outputs read off by hand
        model.embedding.projection.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        model.embedding.projection.bias.zero_()
    return model


def test_registry_lists_both_encoders():
    assert TEXT_ENCODERS.names() == ["gru", "hem"]
    assert TEXT_ENCODERS.get("hem").vocabulary == "hybrid"


def test_hem_maps_a_frequent_word_to_its_language_row_and_a_rare_one_to_its_latent_row():
    model = _hem_model()
    de, en = language_view(VOCAB, "de"), language_view(VOCAB, "en")
    assert en.encode("dog cat mouse hund") == [3, 5, 6, 1]      # hund is German: UNK in English
    assert de.encode("hund katze dog") == [2, 4, 1]
    ids = torch.tensor([[3, 5, 4, 6, 2, 0]])
    out = model.embedding(ids)[0]
    # dog: its own row (0.5, −1) → (0.5, −1, −0.5); cat and katze share latent token 0 (3, 0) →
    # (3, 0, 3); mouse: token 1 (0, −3) → (0, −3, −3); hund (1, 2) → (1, 2, 3); PAD → zeros
    expected = torch.tensor([[0.5, -1.0, -0.5], [3.0, 0.0, 3.0], [3.0, 0.0, 3.0],
                             [0.0, -3.0, -3.0], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(out, expected)
    # the assignment is frozen (a buffer); the rows and the layer train
    assert "embedding.row_of_id" in model.state_dict()
    assert "embedding.row_of_id" not in dict(model.named_parameters())
    with pytest.raises(ValueError, match="needs its language|only with its language"):
        language_view(VOCAB, None)


def test_parameter_counts_by_hand():
    """gru, vocabulary 5, embedding 3, joint 4, image 6: image 6·4 + 4 = 28, embedding 5·3 = 15,
    GRU 3·(4·3 + 4·4 + 4 + 4) = 108 → 151. hem with 6 rows of 2: rows 12 + layer 2·3 + 3 = 21 →
    28 + 21 + 108 = 157; the 7-id assignment is a buffer, not a parameter."""
    torch.manual_seed(0)
    gru = RankingModel(5, embedding_dim=3, joint_dim=4, image_dim=6)
    assert parameter_counts(gru) == {"trainable": 151, "total": 151, "text_embedding": 15,
                                     "pretraining": 0, "training": 151}
    assert parameter_counts(_hem_model()) == {"trainable": 157, "total": 157, "text_embedding": 21,
                                              "pretraining": 0, "training": 157}
    frozen = _hem_model()
    frozen.embedding.weight.requires_grad_(False)
    assert parameter_counts(frozen) == {"trainable": 145, "total": 157, "text_embedding": 9,
                                        "pretraining": 0, "training": 145}
    # an objective's training-only modules (SMALR's heads) count as trained, not as kept
    assert parameter_counts(gru, objective_parameters=40) == {"trainable": 151, "total": 151,
                                                              "text_embedding": 15, "pretraining": 0,
                                                              "training": 191}
    # HEM's pretraining (recorded in the model's options): an assignment layer from 2-d rows to 4
    # latent tokens, 4·2 + 4 = 12, and 2 dropped latent rows of 2, 4: 16 trained, none kept
    pretrained = RankingModel(7, embedding_dim=3, joint_dim=4, image_dim=6, text_encoder="hem",
                              text_options={"rows": 6, "row_dim": 2, "pretraining_parameters": 16})
    assert parameter_counts(pretrained, objective_parameters=40) == {
        "trainable": 157, "total": 157, "text_embedding": 21, "pretraining": 16, "training": 213}


def test_gru_initialisation_is_unchanged_by_the_registry():
    """The default encoder draws the same weights as before the choice existed (image layer,
    table ±0.1, GRU): nothing trained earlier changes."""
    torch.manual_seed(3)
    model = RankingModel(7, embedding_dim=3, joint_dim=4, image_dim=5)
    torch.manual_seed(3)
    image = torch.nn.Linear(5, 4)
    table = torch.nn.Embedding(7, 3, padding_idx=0)
    gru = torch.nn.GRU(3, 4, batch_first=True)
    bound = (6.0 / (5 + 4)) ** 0.5
    image.weight.data.uniform_(-bound, bound)
    table.weight.data.uniform_(-0.1, 0.1)
    table.weight.data[0].zero_()
    gru.reset_parameters()
    assert torch.equal(model.image_projection.weight, image.weight)
    assert torch.equal(model.embedding.weight, table.weight)
    assert torch.equal(model.gru.weight_hh_l0, gru.weight_hh_l0)
    assert model.config()["text_encoder"] == "gru" and model.config()["text_options"] == {}


def test_hem_init_file_is_checked_against_the_vocabulary(tmp_path):
    path = tmp_path / "hem_init.pt"
    torch.save({"format": HEM_INIT_FORMAT, "weight": ROWS, "pretraining_parameters": 16}, path)
    init = read_hem_init(path, VOCAB)
    assert torch.equal(init["row_of_id"], torch.tensor([0, 1, 2, 3, 4, 4, 5]))
    assert init["pretraining_parameters"] == 16
    torch.save({"format": HEM_INIT_FORMAT, "weight": ROWS}, path)
    with pytest.raises(ValueError, match=r"hem_init.pt: no pretraining_parameters \(a count >= 0\): "
                                         r"delete it and rerun its pretrain_hem job"):
        read_hem_init(path, VOCAB)
    torch.save({"format": HEM_INIT_FORMAT, "weight": ROWS[:5], "pretraining_parameters": 16}, path)
    with pytest.raises(ValueError, match=r"hem_init.pt: \(5, 2\) rows, the vocabulary needs 6"):
        read_hem_init(path, VOCAB)
    torch.save({"weight": ROWS}, path)
    with pytest.raises(ValueError, match="not a HEM initial state"):
        read_hem_init(path, VOCAB)


def test_load_vocabulary_reads_either_kind_and_names_a_bad_file(tmp_path):
    hybrid, shared, bad = tmp_path / "h.json", tmp_path / "s.json", tmp_path / "b.json"
    write_json_atomic(hybrid, VOCAB.to_json())
    write_json_atomic(shared, build_vocabulary(["a b", "b"], min_count=1).to_json())
    bad.write_text(json.dumps({"latent_size": 2, "specific": {"en": ["dog"]}}))
    assert load_vocabulary(hybrid) == VOCAB
    assert load_vocabulary(shared).words == ["<pad>", "<unk>", "b", "a"]
    with pytest.raises(ValueError, match=r"b.json: not a HEM vocabulary"):
        load_vocabulary(bad)


# --------------------------------------------------------------------------------------------
# A tiny HEM run: training, checkpoint, evaluation


def _hem_world(root):
    """test_training's world with a hand-made HEM vocabulary: each language's 3 most frequent
    words specific, the rest on 4 latent tokens (by alphabetical position), rows seeded."""
    spec, _ = _world(root)
    frame = read_captions(spec["c2i"][0]["captions"])
    specific, latent = {}, {}
    for lang in ("de", "en"):
        counts = build_vocabulary(frame[frame["lang"] == lang]["text"], min_count=1).counts
        ranked = sorted(counts, key=lambda w: (-counts[w], w))
        specific[lang] = tuple(ranked[:3])
        latent[lang] = {w: i % 4 for i, w in enumerate(sorted(ranked[3:]))}
    vocab = HybridVocabulary(specific=specific, latent=latent, latent_size=4)
    write_json_atomic(root / "hem_vocab.json", vocab.to_json())
    weight = torch.randn(2 + vocab.n_specific + 4, 5, generator=torch.Generator().manual_seed(0))
    torch.save({"format": HEM_INIT_FORMAT, "weight": weight, "pretraining_parameters": 33}, root / "hem_init.pt")
    spec = {**spec, "vocab": {"path": str(root / "hem_vocab.json")},
            "text_init": str(root / "hem_init.pt")}
    return spec, vocab, weight


def test_a_hem_run_trains_saves_and_evaluates(tmp_path):
    spec, vocab, weight = _hem_world(tmp_path)
    settings = {**SETTINGS, "text_encoder": "hem", "max_updates": 20}
    training.train(spec=spec, settings=run_settings(settings), out_dir=tmp_path / "model", seed=1)
    assert load_vocabulary(tmp_path / "model" / "vocab.json") == vocab
    model, meta = checkpoints.load_model(tmp_path / "model" / "checkpoint.pt")
    assert (meta["text_encoder"], meta["text_options"]) == ("hem", {"rows": len(weight), "row_dim": 5,
                                                                    "pretraining_parameters": 33})
    assert torch.equal(model.embedding.row_of_id, vocab.rows())        # the assignment stayed frozen
    assert not torch.equal(model.embedding.weight, weight)             # the rows trained
    # the model encodes a caption by its language: the same form in two languages can differ
    en = encode.encode_captions_texts(model, vocab, ["a red ball"], lang="en")
    ids_en = language_view(vocab, "en").encode("a red ball")
    assert torch.allclose(en, model.encode_captions(torch.tensor([ids_en]), torch.tensor([3])), atol=1e-6)

    from pseudopairs.evaluation.step import evaluate_checkpoint
    val_caps, val_feats = spec["validation"]["captions"], spec["validation"]["features"]
    metrics = evaluate_checkpoint(
        checkpoint=str(tmp_path / "model" / "checkpoint.pt"),
        vocab_path=str(tmp_path / "model" / "vocab.json"),
        spec={"captions": val_caps, "features": val_feats, "langs": ["en", "de"],
              "translation_captions": val_caps, "translation_langs": ["en", "de"]})
    # 2·(12·5 + 12·6)... computed from the model's own shapes: 5-wide rows, embedding 12, joint 24
    rows = len(weight) * 5 + 5 * 12 + 12
    gru = 3 * (24 * 12 + 24 * 24 + 24 + 24)
    image = 24 * 24 + 24
    assert metrics["parameters"] == {"trainable": rows + gru + image, "total": rows + gru + image,
                                     "text_embedding": rows, "pretraining": 33,
                                     "training": rows + gru + image + 33}
    # the metrics are those of the model's own encodings: every caption encoded alone through
    # its language's view, the images' features through the image encoder, ranked exactly
    from pseudopairs.evaluation import retrieval_metrics
    from pseudopairs.core.io import load_features

    image_ids, features = load_features(val_feats)
    row_of = {image_id: r for r, image_id in enumerate(image_ids)}
    captions = read_captions(val_caps)
    model.eval()
    with torch.no_grad():
        images = model.encode_images(torch.as_tensor(features))
        for lang in ("en", "de"):
            subset = captions[captions["lang"] == lang]
            view = language_view(vocab, lang)
            texts = [model.encode_captions(torch.tensor([ids]), torch.tensor([len(ids)]))[0]
                     for ids in (view.encode(text) for text in subset["text"])]
            want = retrieval_metrics(image_embeddings=images, caption_embeddings=torch.stack(texts),
                                     caption_image_index=[row_of[i] for i in subset["image_id"]],
                                     similarity=model.similarity)
            assert metrics["retrieval"][lang] == pytest.approx(want), lang
            assert want["rsum"] > 0


def test_a_hem_run_needs_a_hem_vocabulary_and_its_initial_rows(tmp_path):
    spec, _, _ = _hem_world(tmp_path)
    with pytest.raises(ValueError, match="gives no text_init"):
        training.train(spec={k: v for k, v in spec.items() if k != "text_init"},
                       settings=run_settings({**SETTINGS, "text_encoder": "hem"}), out_dir=tmp_path / "a", seed=1)
    shared = tmp_path / "shared.json"
    write_json_atomic(shared, build_vocabulary(["a b"], min_count=1).to_json())
    with pytest.raises(ValueError, match="text_encoder hem needs a hybrid vocabulary, got a shared one"):
        training.train(spec={**spec, "vocab": {"path": str(shared)}},
                       settings=run_settings({**SETTINGS, "text_encoder": "hem"}), out_dir=tmp_path / "b", seed=1)
    with pytest.raises(SettingsError, match="model.text_encoder"):
        training.train(spec=spec, settings=run_settings({**SETTINGS, "text_encoder": "lstm"}),
                       out_dir=tmp_path / "c", seed=1)


def test_an_experiment_chooses_its_text_encoder():
    config = copy.deepcopy(demo())
    config["experiments"]["de_coco"]["model"] = {"text_encoder": "hem"}
    assert ex.experiment_model(config, "de_coco").text_encoder == "hem"
    assert "text_encoder" not in ex.training_job(config, "en", 1).to_dict()["settings"]["model"]  # default: not passed
    config["experiments"]["de_coco"]["model"] = {"text_encoder": "lstm"}
    with pytest.raises(Exception, match=r"text_encoder.*experiments\.de_coco\.model"):
        check_config(config)


def test_a_hem_seed_block_trains_its_seeds_one_after_the_other(tmp_path, caplog):
    """The batched stack implements the gru encoder only: a hem block asked to batch trains each
    seed as a job of its own would, and says why."""
    from pseudopairs.model.stack_training import train_stack
    spec, _, _ = _hem_world(tmp_path)
    settings = {**SETTINGS, "text_encoder": "hem", "max_updates": 10, "stack_compute": "batched"}
    jobs = [{"seed": s, "spec": spec, "out_dir": str(tmp_path / f"seed{s}")} for s in (1, 2)]
    with caplog.at_level("WARNING"):
        summaries = train_stack(jobs=jobs, settings=run_settings(settings))
    assert "text_encoder 'hem' (the batched model implements 'gru')" in caplog.text
    alone = training.train(spec=spec, settings=run_settings(settings), out_dir=tmp_path / "alone", seed=2)
    assert summaries[1]["best_score"] == alone["best_score"]
    assert torch.equal(torch.load(tmp_path / "seed2" / "checkpoint.pt", weights_only=True)["model_state"]["embedding.weight"],
                       torch.load(tmp_path / "alone" / "checkpoint.pt", weights_only=True)["model_state"]["embedding.weight"])


def test_paper_002s_network_trains_saves_and_counts(tmp_path):
    """002's rows (``image_layers: 2``, ``text_projection: true``; config/experiments.yaml) train,
    save and evaluate that network: the checkpoint rebuilds it, and metrics.json counts the two
    image layers (24·24 + 24, then 24·24 + 24: the width between them defaults to joint_dim) and
    the text layer (24·24 + 24) besides what the one-layer HEM model has."""
    spec, vocab, weight = _hem_world(tmp_path)
    settings = {**SETTINGS, "text_encoder": "hem", "max_updates": 20, "image_layers": 2, "text_projection": True}
    training.train(spec=spec, settings=run_settings(settings), out_dir=tmp_path / "model", seed=1)
    model, meta = checkpoints.load_model(tmp_path / "model" / "checkpoint.pt")
    assert (meta["image_layers"], meta["image_hidden"], meta["text_projection"]) == (2, 24, True)
    assert model.image_hidden_layer is not None and model.text_projection is not None

    from pseudopairs.evaluation.step import evaluate_checkpoint
    val_caps, val_feats = spec["validation"]["captions"], spec["validation"]["features"]
    metrics = evaluate_checkpoint(
        checkpoint=str(tmp_path / "model" / "checkpoint.pt"), vocab_path=str(tmp_path / "model" / "vocab.json"),
        spec={"captions": val_caps, "features": val_feats, "langs": ["en", "de"]})
    rows = len(weight) * 5 + 5 * 12 + 12
    gru = 3 * (24 * 12 + 24 * 24 + 24 + 24)
    image = 2 * (24 * 24 + 24)
    text = 24 * 24 + 24
    assert metrics["parameters"]["trainable"] == rows + gru + image + text


def test_the_batched_stack_refuses_002s_branches():
    """The batched model has one affine image layer and no text layer: runs with 002's branches
    train one after the other, and the reason says so; papers 000/004's settings still batch."""
    from pseudopairs.model.job import RunSettings
    from pseudopairs.model.stack import stack_supported

    def why(**model):
        return stack_supported(RunSettings.from_dict(run_settings({**SETTINGS, **model})))

    assert why() is None
    assert why(image_layers=2) == why(text_projection=True) == (
        "image_layers 2 or text_projection (the batched model implements one image layer and no text layer)")
