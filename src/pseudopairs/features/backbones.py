"""Image backbones by name (``features.arch``): any torchvision classification model, its pooled
embedding, and its published weights read from the torch hub cache.

- **Names**: every model of ``torchvision.models.list_models(module=torchvision.models)`` (the
  classification models: resnet50 = the paper's, resnet152, vit_b_16, convnext_base,
  efficientnet_b0, swin_t, …), built with ``torchvision.models.get_model(name, weights=None)``.
- **The embedding**: the input of the model's classifier layer, its last ``nn.Linear`` producing
  the class logits, which is replaced by the identity: ResNet's average pool (2,048 for
  resnet50), ViT's class token after the final norm (768 for vit_b_16), ConvNeXt's pooled,
  normalised vector (1,024 for convnext_base), EfficientNet's pool (1,280 for b0), VGG's fc7
  (4,096). SqueezeNet, whose classifier is a convolution, has none and is refused.
- **Weights** (``features.weights``): ``none`` (seeded random), a local state dict, ``imagenet``
  (the model's ``IMAGENET1K_V1`` weights: for resnet50 the paper's) or any entry of the model's
  torchvision weights enum by name (``IMAGENET1K_V2``, ``IMAGENET1K_SWAG_E2E_V1``, ``DEFAULT``).
  An enum entry's file is the one torchvision's own loader caches,
  ``$TORCH_HOME/hub/checkpoints/<basename of its URL>``; it is read from there only, never
  downloaded, and its SHA-256 must begin with the hash in its name (as
  ``torch.hub.load_state_dict_from_url(check_hash=True)`` checks).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path
from urllib.parse import urlparse

#: The ResNets torchvision has had since its first releases: named without importing torchvision
#: (a config check runs in every Snakemake parse). Any other name is checked against torchvision.
CLASSIC_RESNETS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")

#: ``features.weights: imagenet`` = this entry of the model's weights enum.
IMAGENET = "IMAGENET1K_V1"

#: torch.hub's rule for the hash in a checkpoint's file name (``resnet50-0676ba61.pth``).
_HASH_IN_NAME = re.compile(r"-([a-f0-9]*)\.")
_ENUM_ENTRY = re.compile(r"[A-Z][A-Z0-9_]*")


class BackboneError(ValueError):
    """A backbone or weights name that torchvision does not have; the message names the key."""


@functools.lru_cache(maxsize=None)
def backbone_names() -> tuple[str, ...]:
    """torchvision's classification models, by name."""
    import torchvision

    return tuple(torchvision.models.list_models(module=torchvision.models))


def check_arch(arch: str) -> str:
    """``arch`` if torchvision has a classification model of that name, else a
    :class:`BackboneError` naming ``features.arch``."""
    if arch in CLASSIC_RESNETS:
        return arch
    names = backbone_names()
    if arch not in names:
        raise BackboneError(f"features.arch: {arch!r} is not a torchvision classification model "
                            f"(torchvision.models.list_models(): {', '.join(names)})")
    if arch.startswith("squeezenet"):
        raise BackboneError(f"features.arch: {arch!r} has no linear classifier (its classifier is a "
                            "convolution), so no pooled embedding before it; pick another model")
    return arch


def is_enum_weights(weights: str) -> bool:
    """Whether ``features.weights`` names torchvision weights (``imagenet`` or an enum entry)."""
    return weights == "imagenet" or bool(_ENUM_ENTRY.fullmatch(weights))


def weights_entry(arch: str, weights: str):
    """The torchvision weights enum entry ``features.weights`` names for ``arch``
    (``imagenet`` = :data:`IMAGENET`); a :class:`BackboneError` listing the entries otherwise."""
    import torchvision

    enum = torchvision.models.get_model_weights(check_arch(arch))
    name = IMAGENET if weights == "imagenet" else weights
    if name == "DEFAULT":
        return enum.DEFAULT
    if name not in enum.__members__:
        raise BackboneError(
            f"features.weights: {weights!r}: torchvision's {enum.__name__} has no {name} "
            f"(it has {', '.join(entry.name for entry in enum)}, or DEFAULT)")
    return enum[name]


def hub_checkpoint_path(arch: str, weights: str) -> Path:
    """Where torchvision's loader caches the weights file of ``weights`` (an enum entry or
    ``imagenet``) for ``arch``: ``torch.hub.get_dir()/checkpoints/<basename of its URL>``."""
    import torch

    url = weights_entry(arch, weights).url
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)


def hub_checkpoint_sketch(arch: str, weights: str) -> str:
    """The entry's full name (``ResNet50_Weights.IMAGENET1K_V1``) for messages."""
    entry = weights_entry(arch, weights)
    return f"{type(entry).__name__}.{entry.name}"


def verify_hub_file(path: str | os.PathLike) -> None:
    """A hub checkpoint's SHA-256 must begin with the hash in its name (torch.hub's
    ``check_hash``): a truncated or replaced file is refused, naming it."""
    path = Path(path)
    match = _HASH_IN_NAME.search(path.name)
    if not match or not match.group(1):
        return
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if not digest.hexdigest().startswith(match.group(1)):
        raise ValueError(f"features.weights: {path}: its SHA-256 {digest.hexdigest()[:16]}… does not "
                         f"begin with {match.group(1)}, the hash in its name (a truncated or replaced "
                         "download); delete it and fetch it again with network access")


# --------------------------------------------------------------------------------------------
# The network and its embedding


def classifier_name(model, *, num_classes: int = 1000) -> str:
    """The qualified name of ``model``'s classifier layer: its last ``nn.Linear`` with
    ``num_classes`` outputs (torchvision assigns the head last)."""
    import torch

    names = [name for name, module in model.named_modules()
             if isinstance(module, torch.nn.Linear) and module.out_features == num_classes]
    if not names:
        raise BackboneError(f"features.arch: {type(model).__name__} has no linear classifier layer "
                            f"with {num_classes} outputs; its pooled embedding is not defined here")
    return names[-1]


def replace_module(model, name: str, module) -> None:
    """Set ``model``'s submodule ``name`` (``fc``, ``heads.head``, ``classifier.2``) to ``module``."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def untrained(arch: str):
    """``torchvision.models.get_model(arch, weights=None)``: float32, CPU, from the global RNG."""
    import torchvision

    return torchvision.models.get_model(check_arch(arch), weights=None)


def embedding_dim(model) -> int:
    """The size of the pooled embedding: the input size of the classifier layer."""
    return int(model.get_submodule(classifier_name(model)).in_features)


def headless(arch: str):
    """An untrained ``arch`` whose classifier layer is the identity, with the embedding's size
    and the classifier's name: ``(model, dim, classifier)``."""
    import torch

    model = untrained(arch)
    name = classifier_name(model)
    dim = embedding_dim(model)
    replace_module(model, name, torch.nn.Identity())
    return model, dim, name


@functools.lru_cache(maxsize=None)
def feature_dim(arch: str) -> int:
    """The embedding size of ``arch`` (built on the meta device where torchvision allows; no
    weights are made)."""
    return _shape_facts(arch)[0]


@functools.lru_cache(maxsize=None)
def fixed_input_size(arch: str) -> int | None:
    """The one input size ``arch`` accepts (ViT, MaxViT: 224), None for any size."""
    return _shape_facts(arch)[1]


def _shape_facts(arch: str) -> tuple[int, int | None]:
    import torch

    check_arch(arch)
    with torch.random.fork_rng(devices=[]):
        try:
            with torch.device("meta"):
                model = untrained(arch)
        except (NotImplementedError, RuntimeError):  # builders that compute on tensors (RegNet)
            model = untrained(arch)
    size = getattr(model, "image_size", None)
    if size is None and type(model).__name__ == "MaxVit":
        size = 224  # its partition sizes are fixed by the 224 px input it is built for
    return embedding_dim(model), (int(size) if size is not None else None)
