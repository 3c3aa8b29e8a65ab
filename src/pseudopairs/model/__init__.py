"""The model stage: the image–sentence ranking model (:mod:`~pseudopairs.model.encoders`), its
losses (:mod:`~pseudopairs.model.losses`), the training data (:mod:`~pseudopairs.model.batches`),
training objectives (:mod:`~pseudopairs.model.objectives`, a registry, and
:mod:`~pseudopairs.model.updates`), settings, checkpoints, encoding and validation, and the
``train`` step (:mod:`~pseudopairs.model.training`).

``pseudopairs.model.RankingModel`` and ``pseudopairs.model.contrastive_loss`` are importable from
here; they are loaded on first use, so the torch-free parts (settings, the objectives registry)
can be imported without torch."""

__all__ = ["IMAGE_NORMALIZATIONS", "RankingModel", "contrastive_loss"]


def __getattr__(name: str):
    if name == "RankingModel":
        from pseudopairs.model.encoders import RankingModel

        return RankingModel
    if name == "contrastive_loss":
        from pseudopairs.model.losses import contrastive_loss

        return contrastive_loss
    if name == "IMAGE_NORMALIZATIONS":
        from pseudopairs.model.settings import IMAGE_NORMALIZATIONS

        return IMAGE_NORMALIZATIONS
    raise AttributeError(f"module 'pseudopairs.model' has no attribute {name!r}")
