"""The image–sentence ranking model (paper §2, §3.1); its loss is in
:mod:`pseudopairs.model.losses`.

- image side: stored 2048-d ResNet50 features → one trained affine layer → ``joint_dim``;
- text side: the text encoder's embedding (``text_encoder``, :mod:`pseudopairs.model.text_encoders`:
  ``gru``, one word-embedding table shared by all languages, PAD = 0; or ``hem``, paper 002's
  hybrid embedding) → uni-directional 1-layer GRU with ``joint_dim`` hidden units → final hidden
  state (of the real, unpadded length);
- both sides L2-normalised, so dot products are cosine similarities; a model trained with a
  similarity that needs non-negative embeddings (``order``, paper 001 / Vendrov et al. 2016) takes
  the absolute value of the unit row, which keeps it a unit row;
- loss: the VSE++ hinge (Faghri et al.), hardest in-batch negative ("max violation") or sum over
  all in-batch negatives, both directions, summed over the batch, with the model's similarity
  (:mod:`pseudopairs.similarity.functions`).

The model knows its similarity (``similarity``, in :meth:`RankingModel.config` and so in the
checkpoint; a checkpoint without it is ``cosine``): validation, evaluation and mining score with it.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from pseudopairs.data.vocab import PAD_ID
from pseudopairs.model.settings import IMAGE_NORMALIZATIONS
from pseudopairs.model.text_encoders import TEXT_ENCODERS
from pseudopairs.similarity.functions import SIMILARITIES



class RankingModel(nn.Module):
    """Image encoder (affine) and caption encoder (embedding → GRU), both L2-normalised (and made
    non-negative, ``|x|``, when the similarity needs it)."""

    def __init__(self, vocab_size: int, *, embedding_dim: int, joint_dim: int,
                 image_dim: int = 2048, image_normalization: str = "raw",
                 similarity: str = "cosine", text_encoder: str = "gru",
                 text_options: dict | None = None, image_layers: int = 1,
                 image_hidden: int | None = None, text_projection: bool = False) -> None:
        super().__init__()
        for key, value in (("vocab_size", vocab_size), ("embedding_dim", embedding_dim),
                           ("joint_dim", joint_dim), ("image_dim", image_dim)):
            if int(value) < 1:
                raise ValueError(f"RankingModel: {key} must be ≥ 1, got {value}")
        self.vocab_size = int(vocab_size)
        self.embedding_dim = int(embedding_dim)
        self.joint_dim = int(joint_dim)
        self.image_dim = int(image_dim)
        if image_normalization not in IMAGE_NORMALIZATIONS:
            raise ValueError(f"RankingModel: image_normalization must be one of "
                             f"{list(IMAGE_NORMALIZATIONS)}, got {image_normalization!r}")
        self.image_normalization = image_normalization
        if similarity not in SIMILARITIES:
            raise ValueError(f"RankingModel: similarity must be one of {SIMILARITIES.names()}, "
                             f"got {similarity!r}")
        self.similarity = similarity
        self.nonnegative = SIMILARITIES.get(similarity).nonnegative
        if int(image_layers) not in (1, 2):
            raise ValueError(f"RankingModel: image_layers must be 1 or 2, got {image_layers}")
        self.image_layers = int(image_layers)
        self.image_hidden = int(image_hidden or self.joint_dim) if self.image_layers == 2 else None
        # paper 002's Embedding Network: two fully connected layers with a ReLU between them
        # (``image_hidden`` ReLU units, then ``image_projection`` into the joint space)
        self.image_hidden_layer = (nn.Linear(self.image_dim, self.image_hidden)
                                   if self.image_layers == 2 else None)
        self.image_projection = nn.Linear(self.image_hidden or self.image_dim, self.joint_dim)
        # Fixed per-dimension standardisation of the stored features (identity by default). An
        # affine layer after a fixed affine map is still one affine map, so this changes the
        # conditioning of the optimisation, not the model class (see set_image_standardization).
        self.register_buffer("image_mean", torch.zeros(self.image_dim))
        self.register_buffer("image_scale", torch.ones(self.image_dim))
        if text_encoder not in TEXT_ENCODERS:
            raise ValueError(f"RankingModel: text_encoder must be one of {TEXT_ENCODERS.names()}, "
                             f"got {text_encoder!r}")
        self.text_encoder = text_encoder
        self.text_options = dict(text_options or {})
        # (B, T) ids → (B, T, embedding_dim), zeros at PAD (an nn.Embedding for gru)
        self.embedding = TEXT_ENCODERS.get(text_encoder).embedding_function()(
            self.vocab_size, self.embedding_dim, self.text_options)
        self.gru = nn.GRU(self.embedding_dim, self.joint_dim, num_layers=1, batch_first=True)
        # 002's text branch: a fully connected layer after the GRU's final state
        self.text_projection = nn.Linear(self.joint_dim, self.joint_dim) if text_projection else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Deterministic from torch's global RNG: Xavier-uniform image projection with zero bias,
        word embeddings (HEM: its rows) uniform in ±0.1 (PAD row zero), HEM's fully connected layer
        and the GRU with PyTorch's default initialisation."""
        fan_in = self.image_hidden or self.image_dim
        bound = math.sqrt(6.0) / math.sqrt(fan_in + self.joint_dim)
        with torch.no_grad():
            self.image_projection.weight.uniform_(-bound, bound)
            self.image_projection.bias.zero_()
            self.embedding.weight.uniform_(-0.1, 0.1)
            self.embedding.weight[PAD_ID].zero_()
        if getattr(self.embedding, "projection", None) is not None:
            self.embedding.projection.reset_parameters()
        self.gru.reset_parameters()
        # drawn after everything the one-layer model draws, so its weights stay as they were
        if self.image_hidden_layer is not None:   # Xavier-uniform, zero bias, as the layer above
            bound = math.sqrt(6.0) / math.sqrt(self.image_dim + self.image_hidden)
            with torch.no_grad():
                self.image_hidden_layer.weight.uniform_(-bound, bound)
                self.image_hidden_layer.bias.zero_()
        if self.text_projection is not None:
            self.text_projection.reset_parameters()

    @property
    def device(self) -> torch.device:
        return self.image_projection.weight.device

    def config(self) -> dict:
        config = {"vocab_size": self.vocab_size, "embedding_dim": self.embedding_dim,
                  "joint_dim": self.joint_dim, "image_dim": self.image_dim,
                  "image_normalization": self.image_normalization, "similarity": self.similarity,
                  "text_encoder": self.text_encoder, "text_options": dict(self.text_options)}
        if self.image_layers != 1 or self.text_projection is not None:   # 002's branches
            config.update(image_layers=self.image_layers, image_hidden=self.image_hidden,
                          text_projection=self.text_projection is not None)
        return config

    def set_text_embedding(self, *, weight, row_of_id) -> None:
        """HEM's pretrained rows and its frozen assignment (:func:`~pseudopairs.model.text_encoders.read_hem_init`)."""
        if self.text_encoder != "hem":
            raise ValueError(f"set_text_embedding: the {self.text_encoder} text encoder has no "
                             "pretrained rows")
        with torch.no_grad():
            self.embedding.weight.copy_(weight)
            self.embedding.row_of_id.copy_(row_of_id)

    def set_image_standardization(self, *, mean, std) -> None:
        """Standardise image features as ``(x - mean) / std`` before the affine layer; dimensions
        with (near) zero spread keep scale 1. Features from a randomly initialised ResNet share a
        large common component (cosine ≈ 0.998 between any two images), which makes the
        max-violation loss collapse to equal embeddings; standardising removes it."""
        mean = torch.as_tensor(mean, dtype=torch.float32).reshape(self.image_dim)
        std = torch.as_tensor(std, dtype=torch.float32).reshape(self.image_dim)
        with torch.no_grad():
            self.image_mean.copy_(mean)
            self.image_scale.copy_(torch.where(std > 1e-6, std, torch.ones_like(std)))

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """(B, image_dim) stored features (any float dtype) → (B, joint_dim) unit rows."""
        features = features.to(device=self.device, dtype=self.image_projection.weight.dtype)
        if self.image_normalization == "l2":
            features = F.normalize(features, dim=1)
        # identity unless set_image_standardization was called (image_normalization: standardize)
        features = (features - self.image_mean) / self.image_scale
        if self.image_hidden_layer is not None:
            features = F.relu(self.image_hidden_layer(features))
        return self._joint(self.image_projection(features))

    def encode_captions(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(B, T) padded token ids and (B,) real lengths (each ≥ 1) → (B, joint_dim) unit rows:
        the GRU's hidden state after the last real token."""
        lengths = torch.as_tensor(lengths, dtype=torch.int64).cpu()
        if tokens.ndim != 2 or lengths.shape != (tokens.shape[0],):
            raise ValueError(f"encode_captions: tokens {tuple(tokens.shape)} and lengths "
                             f"{tuple(lengths.shape)} do not match")
        embedded = self.embedding(tokens.to(self.device))
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        _, hidden = self.gru(packed)          # (1, B, joint_dim), back in the input order
        final = hidden[-1]
        if self.text_projection is not None:
            final = self.text_projection(final)
        return self._joint(final)

    def _joint(self, x: torch.Tensor) -> torch.Tensor:
        """Rows into the joint space: L2-normalised, then ``|x|`` if the similarity needs
        non-negative embeddings (Vendrov et al.'s absolute value; the norm stays 1)."""
        x = F.normalize(x, dim=1)
        return x.abs() if self.nonnegative else x
