"""What the search tests share: a small model whose embeddings can be computed by hand (an image's
mean colour; a sentence's colour words), a collection of solid-colour images, and the command
line. (The real exported model of the tiny demo run: tests/test_search_export.py's session
fixtures ``tiny_run`` and ``tiny_export``.)"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from conftest import REPO

WORDS = {"en": {"red": 0, "green": 1, "blue": 2}, "fr": {"rouge": 0, "vert": 1, "bleu": 2}}

# id (relative path without extension) -> colour; sub-folders on purpose (recursive, sorted)
COLOURS = {
    "a/red": (250, 10, 10), "a/pink": (230, 120, 120), "b/green": (10, 240, 20),
    "b/deep/olive": (120, 160, 30), "blue": (20, 20, 250), "grey": (128, 128, 128),
    "navy": (10, 10, 120),
}


def colour_vector(rgb) -> np.ndarray:
    v = np.array([*(c / 255.0 for c in rgb), 0.3], dtype=np.float64)
    return (v / np.linalg.norm(v)).astype(np.float32)


def text_vector(text: str, lang: str) -> np.ndarray:
    v = np.full(4, 0.1)
    for word in text.lower().split():
        if word in WORDS[lang]:
            v[WORDS[lang][word]] += 1.0
    return (v / np.linalg.norm(v)).astype(np.float32)


class ColourModel:
    """The exported model's interface (``pseudopairs.load``) with embeddings computable by hand:
    an image is its mean RGB colour (and 0.3), a sentence the sum of its colour words (and 0.1)."""

    languages = ("en", "fr")
    dim = 4

    def __init__(self, folder: Path, *, model_hash: str = "c0ffee" * 10, delay: float = 0.0):
        self.folder = Path(folder)
        self.model_hash = model_hash
        self.delay = delay
        self.image_calls = 0
        self.images_encoded = 0
        self.text_calls = 0

    def encode_texts(self, texts, *, lang, batch_size=256):
        if lang not in self.languages:
            raise ValueError(f"unknown language {lang!r}; the model's languages: en, fr")
        self.text_calls += 1
        if self.delay:
            import time

            time.sleep(self.delay)
        return np.stack([text_vector(t, lang) for t in texts]) if texts else np.zeros((0, 4), np.float32)

    def encode_images(self, images, *, batch_size=64, progress=False):
        self.image_calls += 1
        out = []
        for i, image in enumerate(images):
            try:
                source = io.BytesIO(image) if isinstance(image, bytes) else image
                with Image.open(source) as img:
                    rgb = np.asarray(img.convert("RGB"), dtype=np.float64).reshape(-1, 3).mean(axis=0)
            except Exception:  # noqa: BLE001
                raise ValueError(f"image {i}: not an image") from None
            out.append(colour_vector(rgb))
        self.images_encoded += len(images)
        return np.stack(out)


def png_bytes(rgb, size: int = 12) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (size, size), tuple(rgb)).save(out, format="PNG")
    return out.getvalue()


def colour_folder(root: Path) -> Path:
    """The solid-colour collection (plus a text file the index must ignore)."""
    for name, rgb in COLOURS.items():
        path = root / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png_bytes(rgb))
    (root / "notes.txt").write_text("not an image\n")
    return root


def colour_captions(path: Path) -> Path:
    rows = ["image_id,lang,caption", "a/red,en,a red square", "a/red,fr,un carré rouge",
            "b/green,en,green grass", "blue,fr,le ciel bleu", "grey,de,ein graues Quadrat"]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def expected_ranking(query: np.ndarray, k: int) -> list[str]:
    """The ids of the k images of largest cosine with ``query``, by float64 brute force."""
    ids = sorted(COLOURS)
    cos = np.array([float(np.dot(query.astype(np.float64), colour_vector(COLOURS[i]).astype(np.float64)))
                    for i in ids])
    return [ids[j] for j in np.argsort(-cos, kind="stable")[:k]]


def pseudopairs_cli(*args: str, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.run([sys.executable, "-m", "pseudopairs", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=env)
