"""Model checkpoints and the random-number state of a training run.

``checkpoint.pt`` (format :data:`CHECKPOINT_FORMAT`) holds the best weights, the model's
configuration (dimensions, image normalisation, similarity — ``cosine`` when absent), the run's
spec and settings, and the best validation score; ``last.pt`` (format
:data:`STATE_FORMAT`) is the full state of an unfinished run (see :mod:`pseudopairs.model.training`).
:func:`load_model` reads either.
"""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pseudopairs.core.io import atomic_path, reading
from pseudopairs.model.encoders import RankingModel

CHECKPOINT_FORMAT = "pseudopairs.ranking-model/1"


STATE_FORMAT = "pseudopairs.train-state/2"


def save_atomic(path: Path, obj: Any) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def cpu_state(model: torch.nn.Module) -> dict:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def load_model(checkpoint_path, device: str | torch.device = "cpu") -> tuple[RankingModel, dict]:
    """Read a ``checkpoint.pt`` written by :func:`train`: returns the model (eval mode, on
    ``device``) and the metadata (dims, spec, settings, seed, best score, update, metrics).
    The ``last.pt`` of an unfinished or failed run is read too: its best weights so far."""
    path = Path(checkpoint_path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such checkpoint")
    with reading(path, "a model checkpoint", fix="delete it and rerun its training job"):
        data = torch.load(path, map_location=device, weights_only=True)
    if isinstance(data, dict) and data.get("format") == STATE_FORMAT:
        progress = data["progress"]
        if progress.get("best_state") is None:
            raise ValueError(f"{path}: training state from before the first validation holds no "
                             "best weights yet")
        data = {**data["model_config"], "model_state": progress["best_state"],
                "best_score": progress["best_score"], "val_score": progress["best_score"],
                "update": progress["best_update"], "val_metrics": progress["best_metrics"],
                "spec": data["run_key"]["spec"], "seed": data["run_key"]["seed"]}
    elif not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: not a pseudopairs model checkpoint")
    model = RankingModel(data["vocab_size"], embedding_dim=data["embedding_dim"],
                         joint_dim=data["joint_dim"], image_dim=data["image_dim"],
                         image_normalization=data.get("image_normalization", "raw"),
                         similarity=data.get("similarity", "cosine"),  # older checkpoints: cosine
                         text_encoder=data.get("text_encoder", "gru"),  # older checkpoints: gru
                         text_options=data.get("text_options"),
                         image_layers=data.get("image_layers", 1),   # older checkpoints: one layer
                         image_hidden=data.get("image_hidden"),
                         text_projection=data.get("text_projection", False))
    model.load_state_dict(data["model_state"])
    model.to(device).eval()
    meta = {k: v for k, v in data.items() if k != "model_state"}
    return model, meta


def rng_states() -> dict:
    np_state = np.random.get_state(legacy=False)
    np_state["state"]["key"] = np_state["state"]["key"].tolist()
    states = {"python": random.getstate(), "numpy": np_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    random.setstate(states["python"])
    np_state = copy.deepcopy(states["numpy"])
    np_state["state"]["key"] = np.asarray(np_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(np_state)
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
