"""Cross-Lingual Consistency (paper 002, §3.4): a query in one language is translated into every
other language the model supports, each version is scored against every image, and the scores
are aggregated.

Input: ``scores`` (L, Q, I) — ``scores[l, q, i]`` the model's similarity between image ``i`` and
query ``q`` in language ``l`` (the query itself in its own language's slot, its machine
translation in the others'; the caller orders the languages the same way for every query).

- **CLC-A** (:func:`clc_a`): the mean over the L languages; no parameters.
- **CLC-C** (:class:`CLCClassifier`, :func:`train_clc_c`, :func:`clc_c`): a two-layer MLP from
  the L scores of a (query, image) pair to one score — L inputs, 32 hidden units (ReLU), one
  output, no biases by default (002: 352 learnable parameters for ten languages = 10·32 + 32·1);
  trained on the validation split for 30 iterations, full batch (every query against every
  image), with Eq. (3), the bidirectional triplet loss with the top-K most violated negatives.

002 says the MLP's parameters are "initialized with uniform weight": ``init="uniform"`` (the
default) draws each weight from U(−1/√fan_in, 1/√fan_in) with a seeded generator;
``init="constant"`` sets every weight of a layer to 1/fan_in, which starts CLC-C at ReLU(CLC-A)
but keeps the hidden units identical (the symmetry never breaks). The optimiser (Adam) and its
learning rate are not in 002.

Memory: the full batch is L × Q × I scores, the MLP's hidden layer 32 × Q × I. The triplet loss
only reaches the positives and each anchor's top-K negatives, so :func:`eq3_loss` finds those
with the scores computed without gradient (in chunks of queries) and recomputes only them with
gradient: the same loss and the same gradient as the full computation (a test checks), in
O(L · Q · I) memory without the hidden layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from pseudopairs.smalr.paper import CLC_HIDDEN, CLC_ITERATIONS, IMAGE_SENTENCE_SECOND_DIRECTION
from pseudopairs.smalr.triplet import hinge_over_selected, top_negatives

INITS = ("uniform", "constant")


def _check_scores(scores: torch.Tensor) -> torch.Tensor:
    scores = torch.as_tensor(scores, dtype=torch.float32)
    if scores.ndim != 3 or min(scores.shape) < 1:
        raise ValueError(f"CLC: scores must be (languages, queries, images), got "
                         f"{tuple(scores.shape)}")
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("CLC: scores must be finite (every query needs a score in every "
                         "language)")
    return scores


def clc_a(scores) -> torch.Tensor:
    """(L, Q, I) → (Q, I): the mean over languages."""
    return _check_scores(scores).mean(dim=0)


class CLCClassifier(nn.Module):
    """L scores → ``hidden`` units (ReLU) → one score; applied over the last axis after moving
    the language axis (axis 0 of the input) there."""

    def __init__(self, languages: int, *, hidden: int = CLC_HIDDEN, bias: bool = False,
                 init: str = "uniform", seed: int = 0) -> None:
        super().__init__()
        if int(languages) < 1 or int(hidden) < 1:
            raise ValueError(f"CLCClassifier: languages and hidden must be ≥ 1, got "
                             f"{languages}, {hidden}")
        if init not in INITS:
            raise ValueError(f"CLCClassifier: init must be one of {list(INITS)}, got {init!r}")
        self.languages = int(languages)
        self.hidden = nn.Linear(self.languages, int(hidden), bias=bias)
        self.output = nn.Linear(int(hidden), 1, bias=bias)
        generator = torch.Generator().manual_seed(int(seed))
        with torch.no_grad():
            for layer in (self.hidden, self.output):
                fan_in = layer.in_features
                for parameter in layer.parameters():
                    if init == "constant":
                        parameter.fill_(1.0 / fan_in if parameter is layer.weight else 0.0)
                    else:
                        bound = fan_in ** -0.5
                        parameter.copy_(torch.rand(parameter.shape, generator=generator)
                                        * 2 * bound - bound)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        """(L, ...) → (...)."""
        if scores.shape[0] != self.languages:
            raise ValueError(f"CLCClassifier: {scores.shape[0]} languages in the scores, the "
                             f"classifier has {self.languages}")
        x = scores.movedim(0, -1)
        return self.output(torch.relu(self.hidden(x))).squeeze(-1)


@torch.no_grad()
def clc_c(model: CLCClassifier, scores, *, chunk: int = 256) -> torch.Tensor:
    """(L, Q, I) → (Q, I) the classifier's scores, ``chunk`` queries at a time."""
    scores = _check_scores(scores)
    return torch.cat([model(scores[:, start:start + chunk])
                      for start in range(0, scores.shape[1], int(chunk))], dim=0)


def positives_of(query_images, images: int) -> torch.Tensor:
    """(Q,) the image index each query describes → (Q, images) boolean matches."""
    query_images = torch.as_tensor(query_images, dtype=torch.int64)
    if query_images.ndim != 1 or bool((query_images < 0).any()) \
            or bool((query_images >= images).any()):
        raise ValueError(f"CLC: query_images must be image indices in 0..{images - 1}")
    positive = torch.zeros(len(query_images), images, dtype=torch.bool)
    positive[torch.arange(len(query_images)), query_images] = True
    return positive


def eq3_loss(model: CLCClassifier, scores: torch.Tensor, positive: torch.Tensor, *,
             margin: float, top_k: int,
             second_weight: float = IMAGE_SENTENCE_SECOND_DIRECTION,
             chunk: int = 256) -> torch.Tensor:
    """Eq. (3) on the classifier's (Q, I) scores — images as anchors (negatives: other queries)
    plus ``second_weight`` × queries as anchors (negatives: other images) — recomputing only the
    positives and the selected negatives with gradient (module docstring)."""
    positive = positive.to(scores.device)
    full = clc_c(model, scores, chunk=chunk)                                    # (Q, I)
    by_query = top_negatives(full, ~positive, top_k).isfinite()
    query_neg = full.masked_fill(positive, float("-inf")).topk(by_query.shape[1], dim=1).indices
    by_image = top_negatives(full.t(), ~positive.t(), top_k).isfinite()
    image_neg = full.t().masked_fill(positive.t(), float("-inf")).topk(
        by_image.shape[1], dim=1).indices                                       # (I, k) queries
    q_at, i_at = positive.nonzero(as_tuple=True)
    positive_scores = model(scores[:, q_at, i_at])                              # (P,)
    rows = torch.arange(scores.shape[1], device=scores.device).unsqueeze(1)
    query_negatives = model(scores[:, rows, query_neg]).masked_fill(~by_query, float("-inf"))
    columns = torch.arange(scores.shape[2], device=scores.device).unsqueeze(1)
    image_negatives = model(scores[:, image_neg, columns]).masked_fill(~by_image, float("-inf"))
    images_as_anchors = hinge_over_selected(positive_scores, i_at, image_negatives, margin=margin)
    queries_as_anchors = hinge_over_selected(positive_scores, q_at, query_negatives, margin=margin)
    return images_as_anchors + second_weight * queries_as_anchors


@dataclass
class CLCTraining:
    model: CLCClassifier
    losses: list[float] = field(default_factory=list)


def train_clc_c(scores, query_images, *, margin: float, top_k: int, learning_rate: float,
                iterations: int = CLC_ITERATIONS, hidden: int = CLC_HIDDEN, bias: bool = False,
                init: str = "uniform", seed: int = 0,
                second_weight: float = IMAGE_SENTENCE_SECOND_DIRECTION,
                chunk: int = 256) -> CLCTraining:
    """Train CLC-C on validation ``scores`` (L, Q, I) where query ``q`` describes image
    ``query_images[q]``: ``iterations`` full-batch Adam steps on :func:`eq3_loss`. Seeded (the
    initialisation); the loss before each step is recorded."""
    scores = _check_scores(scores)
    positive = positives_of(query_images, scores.shape[2])
    if positive.shape[0] != scores.shape[1]:
        raise ValueError(f"train_clc_c: {positive.shape[0]} query images for "
                         f"{scores.shape[1]} queries")
    if int(iterations) < 1 or not float(learning_rate) > 0:
        raise ValueError("train_clc_c: iterations must be ≥ 1 and learning_rate > 0")
    model = CLCClassifier(scores.shape[0], hidden=hidden, bias=bias, init=init,
                          seed=seed).to(scores.device)
    optimiser = torch.optim.Adam(model.parameters(), lr=float(learning_rate))
    result = CLCTraining(model=model)
    for _ in range(int(iterations)):
        loss = eq3_loss(model, scores, positive, margin=margin, top_k=top_k,
                        second_weight=second_weight, chunk=chunk)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        result.losses.append(float(loss.detach()))
    return result
