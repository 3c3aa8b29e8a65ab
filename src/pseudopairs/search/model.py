"""An exported model, loaded (:func:`load`, also :func:`pseudopairs.load`): raw sentences and
images in, L2-normalised joint-space embeddings out.

``encode_texts`` prepares each raw sentence exactly as training's captions were prepared (Moses
or the language's own tokenizer, lowercasing or the run's truecaser, the run's vocabulary with
its unknown words) and runs the model's text branch (:func:`pseudopairs.model.encode.encode_captions_texts`,
the evaluation step's own). ``encode_images`` decodes, resizes and centre-crops each image and
runs the feature network as the ``features`` step does (:mod:`pseudopairs.features.network`),
rounds the features to the stored feature type, then the model's image branch
(:func:`pseudopairs.model.encode.encode_image_features`). So the embeddings of a run's test
captions and images are the evaluation step's.

Loading checks every file's SHA-256 against ``config.json`` and every tensor's name and shape
(:mod:`pseudopairs.search.folder`); nothing is unpickled. Bad input to ``encode_*`` (an unknown
language, a file that is not an image) is a ``ValueError`` naming it.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from pseudopairs.core.io import UnreadableFileError
from pseudopairs.search import folder as fmt


class SearchModel:
    """A loaded export: :attr:`languages`, :attr:`dim`, :attr:`model_hash`, :attr:`folder`,
    :attr:`image_settings`, :meth:`encode_texts`, :meth:`encode_images`."""

    def __init__(self, folder: Path, config: dict, *, device) -> None:
        import torch

        from pseudopairs.model.encoders import RankingModel
        from pseudopairs.model.text_encoders import load_vocabulary

        self.folder = folder
        self.config = config
        self.device = device
        self.languages: tuple[str, ...] = tuple(config["languages"])
        self.dim = int(config["dim"])
        self.model_hash = fmt.model_hash(folder)
        self.image_settings = dict(config["image"])
        self.similarity = config["model"]["similarity"]
        dims = config["model"]
        state = fmt.read_tensors(folder, fmt.MODEL_WEIGHTS, config)
        with torch.random.fork_rng(devices=[]):  # the constructor's random init is overwritten
            model = RankingModel(dims["vocab_size"], embedding_dim=dims["embedding_dim"],
                                 joint_dim=dims["joint_dim"], image_dim=dims["image_dim"],
                                 image_normalization=dims["image_normalization"],
                                 similarity=dims["similarity"], text_encoder=dims["text_encoder"],
                                 text_options=dims["text_options"])
        model.load_state_dict(state, strict=True)
        self.ranking = model.to(device).eval()
        self.vocab = load_vocabulary(folder / config["text"]["vocabulary"])
        self._preparers: dict[str, Callable[[str], str]] = {}
        self._network = None
        if config["image"]["weights"].get("file"):  # its tensors checked now, read when first used
            fmt.check_tensors(folder, config["image"]["weights"]["file"], config)

    # ----------------------------------------------------------------------------------------
    # Text

    def _check_lang(self, lang: str) -> None:
        if lang not in self.languages:
            raise ValueError(f"lang {lang!r}: the model knows {', '.join(self.languages)} "
                             f"({self.folder})")

    def preparer(self, lang: str) -> Callable[[str], str]:
        """``lang``'s text preparation as in training: raw sentence -> space-joined tokens."""
        from pseudopairs.data.text import load_truecaser, prepare_line
        from pseudopairs.data.tokenizers import TOKENIZERS

        self._check_lang(lang)
        if lang not in self._preparers:
            text = self.config["text"]
            entry = text["languages"][lang]
            case = text["case"]
            truecaser = load_truecaser(self.folder / entry["truecaser"]) if entry.get("truecaser") else None
            model = self.folder / entry["tokenizer_model"] if entry.get("tokenizer_model") else None
            tokenizer = TOKENIZERS.get(entry["tokenizer"]["kind"]).load(lang, model)

            def prepare(raw: str) -> str:
                return prepare_line(raw, lang=lang, case=case, truecaser=truecaser, tokenizer=tokenizer)

            self._preparers[lang] = prepare
        return self._preparers[lang]

    def prepare_texts(self, texts: Sequence[str], *, lang: str) -> list[str]:
        """Raw sentences of ``lang`` prepared as training's captions were (tokens joined by
        spaces); a text that is not one line of text is an error naming it."""
        prepare = self.preparer(lang)
        out = []
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(f"texts[{i}]: not a string ({type(text).__name__})")
            if "\n" in text or "\r" in text:
                raise ValueError(f"texts[{i}]: one line of text expected, got a line break")
            out.append(prepare(text))
        return out

    def encode_prepared(self, prepared: Sequence[str], *, lang: str, batch_size: int = 256) -> np.ndarray:
        """Prepared sentences (:meth:`prepare_texts`) -> (n, dim) float32 unit rows."""
        from pseudopairs.model.encode import encode_captions_texts

        self._check_lang(lang)
        if not len(prepared):
            return np.zeros((0, self.dim), dtype=np.float32)
        out = encode_captions_texts(self.ranking, self.vocab, list(prepared), lang=lang,
                                    batch_size=batch_size)
        return out.numpy().astype(np.float32, copy=False)

    def encode_texts(self, texts: Sequence[str], *, lang: str, batch_size: int = 256) -> np.ndarray:
        """Raw sentences of language ``lang`` -> (n, dim) float32, L2-normalised rows."""
        if isinstance(texts, str):
            raise ValueError("encode_texts takes a list of sentences, got one string")
        self._check_lang(lang)
        return self.encode_prepared(self.prepare_texts(texts, lang=lang), lang=lang, batch_size=batch_size)

    # ----------------------------------------------------------------------------------------
    # Images

    @property
    def network(self):
        """The feature network (built on first use), prepared as the features step prepares it."""
        if self._network is None:
            self._network = build_network(self.folder, self.config, device=self.device)
        return self._network

    def load_image(self, image, *, name: str):
        """One image (a path, bytes or a PIL image) decoded, resized and cropped as the features
        step does: uint8 (3, crop, crop); one that is not an image is an error naming it."""
        from PIL import Image

        from pseudopairs.features.network import load_image, preprocess

        resize, crop = self.image_settings["resize"], self.image_settings["crop"]
        try:
            if isinstance(image, Image.Image):
                return preprocess(image.convert("RGB"), resize=resize, crop=crop)
            if isinstance(image, (bytes, bytearray, memoryview)):
                with Image.open(io.BytesIO(bytes(image))) as img:
                    img = img.convert("RGB")
                return preprocess(img, resize=resize, crop=crop)
            if isinstance(image, (str, os.PathLike)):
                if not os.path.isfile(image):
                    raise FileNotFoundError(f"{name}: no such image file")
                return load_image(image, resize=resize, crop=crop)
        except FileNotFoundError:
            raise
        except Exception as err:  # noqa: BLE001 - whatever PIL says, the input is not an image
            detail = " ".join(str(err).split())
            raise UnreadableFileError(f"{name}: not an image ({type(err).__name__}: {detail})") from None
        raise ValueError(f"{name}: an image is a path, bytes or a PIL image, got {type(image).__name__}")

    def features(self, batch) -> np.ndarray:
        """The feature network's output for a uint8 (B, 3, crop, crop) batch, rounded to the
        stored feature type as the features step stores it."""
        import torch

        from pseudopairs.features.network import autocast_dtype, forward

        with torch.inference_mode():
            out = forward(self.network, batch, device=self.device, amp_dtype=autocast_dtype(self.device))
        return out.float().cpu().numpy().astype(self.image_settings["feature_dtype"])

    def encode_features(self, features: np.ndarray) -> np.ndarray:
        """Stored-type features -> (n, dim) float32 unit rows: the model's image branch."""
        from pseudopairs.model.encode import encode_image_features

        return encode_image_features(self.ranking, features).numpy().astype(np.float32, copy=False)

    def _decoded(self, images: list, start: int, batch_size: int):
        """One batch of images decoded, resized and cropped: uint8 (B, 3, crop, crop)."""
        import torch

        chunk = images[start:start + batch_size]
        return torch.stack([self.load_image(image, name=_image_name(image, start + j))
                            for j, image in enumerate(chunk)])

    def encode_images(self, images: Sequence, *, batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Images (paths, bytes or PIL images) -> (n, dim) float32, L2-normalised rows. The next
        batch is decoded in a background thread while the network runs on this one (PIL releases
        the GIL while it decodes and resizes)."""
        from concurrent.futures import ThreadPoolExecutor

        from tqdm import tqdm

        if isinstance(images, (str, bytes, os.PathLike)):
            raise ValueError("encode_images takes a list of images, got one")
        images = list(images)
        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
        if not images:
            return np.zeros((0, self.dim), dtype=np.float32)
        starts = list(range(0, len(images), batch_size))
        blocks = []
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode") as pool:
            pending = pool.submit(self._decoded, images, starts[0], batch_size)
            for k in tqdm(range(len(starts)), desc="encode images", unit="batch", disable=not progress,
                          mininterval=2):
                batch = pending.result()
                if k + 1 < len(starts):
                    pending = pool.submit(self._decoded, images, starts[k + 1], batch_size)
                blocks.append(self.features(batch))
        return self.encode_features(np.concatenate(blocks))


def build_network(folder: Path, config: dict, *, device):
    """The feature network of ``config.json``'s ``image`` entry: torchvision ``arch`` without
    its classifier, with the folder's weights (safetensors) or torchvision's published weights
    from the torch hub cache (their SHA-256 checked against the record), prepared as the
    features step prepares it (``channels_last``, frozen, eval mode, on ``device``)."""
    import torch

    from pseudopairs.features import backbones
    from pseudopairs.features.network import build_model, prepare_model, weights_checkpoint_path

    image = config["image"]
    weights = image["weights"]
    if weights.get("file"):
        state = fmt.read_tensors(folder, weights["file"], config)
        with torch.random.fork_rng(devices=[]):
            network, _, _ = backbones.headless(image["arch"])
        network.load_state_dict(state, strict=True)
    else:  # torchvision's published weights: named, with their SHA-256, not copied
        path = weights_checkpoint_path(weights["name"], image["arch"])
        if not path.is_file():
            raise fmt.ModelFolderError(
                f"{folder / fmt.CONFIG}: the image network uses torchvision's {weights['name']} "
                f"weights of {image['arch']}, which are not in the torch hub cache ({path}); fetch "
                "them once with network access or point TORCH_HOME at a cache that holds them")
        if fmt.file_sha256(path) != weights["sha256"]:
            raise fmt.ModelFolderError(f"{path}: SHA-256 differs from the {weights['sha256'][:16]}… "
                                       f"{folder / fmt.CONFIG} records for {weights['name']}")
        network = build_model(weights["name"], arch=image["arch"])
    return prepare_model(network.eval(), device)


def _image_name(image, index: int) -> str:
    if isinstance(image, (str, os.PathLike)):
        return os.fspath(image)
    return f"images[{index}] ({type(image).__name__})"


def load(folder, *, device: str = "cpu") -> SearchModel:
    """An exported model folder (``pseudopairs export``), every file checked against the
    SHA-256 ``config.json`` records and every tensor against its shape there."""
    from pseudopairs.core.settings import resolve_device

    import torch

    folder = Path(folder)
    config = fmt.read_config(folder)
    fmt.verify_files(folder, config)
    return SearchModel(folder, config, device=torch.device(resolve_device(device, key="device")))
