"""Rendering a scene to an RGB image (backgrounds with texture, object silhouettes, textures, details)."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from pseudopairs.world.scene import Scene



def _shade(rgb: Sequence[int], factor: float) -> tuple[int, int, int]:
    """factor < 1 darkens, > 1 lightens towards white."""
    out = [v * factor if factor <= 1 else v + (255 - v) * (factor - 1) for v in rgb]
    return tuple(min(255, max(0, int(round(v)))) for v in out)


def _contrast(rgb: Sequence[int]) -> tuple[int, int, int]:
    """Pattern colour for a textured object: darker for light colours, lighter for dark ones."""
    luminance = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    return _shade(rgb, 0.5) if luminance > 90 else _shade(rgb, 1.55)


def render_background(background: str, rgb: tuple[int, int, int], *, image_size: int,
                      texture_seed: int) -> Image.Image:
    """The background image: each kind has its own characteristic pattern."""
    s = image_size
    rng = np.random.default_rng(texture_seed)
    img = Image.new("RGB", (s, s), rgb)
    draw = ImageDraw.Draw(img)
    u = max(1, s // 16)
    if background == "lawn":  # mown stripes plus blades
        for i, x in enumerate(range(0, s, 2 * u)):
            if i % 2:
                draw.rectangle([x, 0, x + 2 * u - 1, s], fill=_shade(rgb, 0.85))
        for _ in range(s // 3):
            x, y = (int(v) for v in rng.integers(0, s, size=2))
            draw.line([x, y, x + int(rng.integers(-1, 2)), y - u], fill=_shade(rgb, 0.65))
    elif background == "beach":  # sand grains
        for _ in range(s // 2):
            x, y = (int(v) for v in rng.integers(0, s, size=2))
            draw.point((x, y), fill=_shade(rgb, 0.7))
    elif background == "snow":  # bluish drifts and flakes
        for y in range(0, s, 3 * u):
            draw.arc([-u, y, s + u, y + 3 * u], 0, 180, fill=(200, 210, 230))
        for _ in range(s // 4):
            x, y = (int(v) for v in rng.integers(0, s, size=2))
            draw.point((x, y), fill=(190, 205, 230))
    elif background == "water":  # waves
        phase = float(rng.uniform(0, 2 * math.pi))
        for y0 in range(u, s, 2 * u):
            pts = [(x, y0 + 0.6 * u * math.sin(phase + x * 2 * math.pi / (4 * u))) for x in range(0, s + 1, 2)]
            draw.line(pts, fill=_shade(rgb, 1.35), width=max(1, u // 3))
    elif background == "road":  # asphalt with edge lines and a dashed centre line
        draw.rectangle([0, 0, s, u], fill=_shade(rgb, 1.4))
        draw.rectangle([0, s - u, s, s], fill=_shade(rgb, 1.4))
        y = s // 2
        for x in range(int(rng.integers(0, 4 * u)) - 4 * u, s, 4 * u):
            draw.rectangle([x, y - u // 3, x + 2 * u, y + u // 3], fill=(235, 235, 235))
    elif background == "carpet":  # diamond lattice
        step = 4 * u
        for c in range(-s, 2 * s, step):
            draw.line([c, 0, c + s, s], fill=_shade(rgb, 0.6), width=max(1, u // 2))
            draw.line([c, 0, c - s, s], fill=_shade(rgb, 0.6), width=max(1, u // 2))
    elif background == "wall":  # bricks and mortar
        bh, bw = 2 * u, 4 * u
        mortar = (215, 210, 200)
        for r, y in enumerate(range(0, s, bh)):
            draw.line([0, y, s, y], fill=mortar, width=max(1, u // 3))
            offset = (bw // 2) * (r % 2)
            for x in range(-offset, s, bw):
                draw.line([x, y, x, y + bh], fill=mortar, width=max(1, u // 3))
    elif background == "sky":  # vertical gradient and clouds
        arr = np.empty((s, s, 3), dtype=np.float32)
        t = np.linspace(0.0, 1.0, s, dtype=np.float32)[:, None]
        top, bottom = np.asarray(_shade(rgb, 0.8), np.float32), np.asarray(_shade(rgb, 1.5), np.float32)
        arr[:] = (top * (1 - t) + bottom * t)[:, None, :]
        img = Image.fromarray(arr.round().astype(np.uint8), "RGB")
        draw = ImageDraw.Draw(img)
        for _ in range(int(rng.integers(1, 3))):
            cx, cy = int(rng.integers(0, s)), int(rng.integers(0, s // 2))
            for dx in (-2 * u, 0, 2 * u):
                draw.ellipse([cx + dx - 2 * u, cy - u - abs(dx) // 3, cx + dx + 2 * u, cy + u],
                             fill=(250, 250, 252))
    elif background == "floor":  # planks
        ph = 3 * u
        for r, y in enumerate(range(0, s, ph)):
            draw.rectangle([0, y, s, y + ph], fill=_shade(rgb, 0.9 + 0.2 * ((r * 7) % 3) / 2))
            draw.line([0, y, s, y], fill=_shade(rgb, 0.5))
            x = int(rng.integers(0, s))
            draw.line([x, y, x, y + ph], fill=_shade(rgb, 0.5))
    else:
        raise ValueError(f"unknown background {background!r}")
    return img


def shape_mask(kind: str, w: int, h: int) -> Image.Image:
    """The kind's silhouette as an ``L`` mask of size (w, h) (255 inside)."""
    m = Image.new("L", (w, h), 0)
    d = ImageDraw.Draw(m)
    W, H = w - 1, h - 1
    if kind == "box":
        d.rectangle([0, 0, W, H], fill=255)
    elif kind in ("ball", "egg"):
        d.ellipse([0, 0, W, H], fill=255)
    elif kind == "tower":  # body with three merlons
        top = round(0.15 * H)
        d.rectangle([0, top, W, H], fill=255)
        for i in range(3):
            x0 = round(i * W * 2 / 5)
            d.rectangle([x0, 0, x0 + round(W / 5), top], fill=255)
    elif kind == "flag":  # cloth on the upper part, pole drawn as a detail
        d.rectangle([round(0.12 * W), 0, W, round(0.62 * H)], fill=255)
    elif kind == "kite":
        d.polygon([(W / 2, 0), (W, 0.4 * H), (W / 2, H), (0, 0.4 * H)], fill=255)
    elif kind == "star":
        pts = []
        for i in range(10):
            r = 0.5 if i % 2 == 0 else 0.21
            a = -math.pi / 2 + i * math.pi / 5
            pts.append((W / 2 + r * W * math.cos(a), H * 0.55 + r * H * 1.05 * math.sin(a)))
        d.polygon(pts, fill=255)
    elif kind == "tent":
        d.polygon([(W / 2, 0), (W, H), (0, H)], fill=255)
    elif kind == "ring":
        d.ellipse([0, 0, W, H], fill=255)
        d.ellipse([0.27 * W, 0.27 * H, 0.73 * W, 0.73 * H], fill=0)
    elif kind == "fish":
        d.ellipse([0, 0.1 * H, 0.75 * W, 0.9 * H], fill=255)
        d.polygon([(0.66 * W, 0.5 * H), (W, 0.05 * H), (W, 0.95 * H)], fill=255)
    elif kind == "house":
        d.rectangle([0.08 * W, 0.45 * H, 0.92 * W, H], fill=255)
        d.polygon([(0, 0.5 * H), (W / 2, 0), (W, 0.5 * H)], fill=255)
    elif kind == "bottle":
        d.rectangle([0, 0.4 * H, W, H], fill=255)
        d.ellipse([0, 0.28 * H, W, 0.52 * H], fill=255)
        d.rectangle([0.32 * W, 0, 0.68 * W, 0.36 * H], fill=255)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return m


_STRIPE_DIRECTION = {"flag": "h", "ring": "h", "bottle": "h", "tent": "d", "ball": "h"}


def texture_patch(kind: str, texture: str, rgb: tuple[int, int, int], w: int, h: int) -> np.ndarray:
    """(h, w, 3) uint8 fill for an object: its colour with the texture in a contrasting shade."""
    yy, xx = np.mgrid[0:h, 0:w]
    period = max(4, round(min(w, h) / 4))
    if texture == "plain":
        pattern = np.zeros((h, w), dtype=bool)
    elif texture == "striped":
        direction = _STRIPE_DIRECTION.get(kind, "v")
        coord = {"h": yy, "v": xx, "d": xx + yy}[direction]
        pattern = (coord // max(2, period // 2)) % 2 == 1
    elif texture == "dotted":
        cy = (yy % period) - period / 2 + 0.5
        cx = (xx % period) - period / 2 + 0.5
        pattern = cx**2 + cy**2 <= (period * 0.28) ** 2
    elif texture == "checkered":
        p = max(2, period // 2 + 1)
        pattern = ((yy // p) + (xx // p)) % 2 == 1
    else:
        raise ValueError(f"unknown texture {texture!r}")
    out = np.empty((h, w, 3), dtype=np.uint8)
    out[:] = np.asarray(rgb, dtype=np.uint8)
    out[pattern] = np.asarray(_contrast(rgb), dtype=np.uint8)
    return out


_OUTLINE = (25, 25, 25)


def _details(kind: str, draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int],
             rgb: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    w, h = x1 - x0 - 1, y1 - y0 - 1
    dark = (45, 40, 35)
    if kind == "flag":
        draw.rectangle([x0, y0, x0 + max(1, round(0.08 * w)), y1 - 1], fill=dark)
    elif kind == "tent":
        draw.polygon([(x0 + w / 2, y0 + 0.45 * h), (x0 + 0.62 * w, y1 - 1), (x0 + 0.38 * w, y1 - 1)],
                     fill=dark)
    elif kind == "house":
        draw.rectangle([x0 + 0.42 * w, y0 + 0.72 * h, x0 + 0.58 * w, y1 - 1], fill=dark)
    elif kind == "fish":
        r = max(1, round(0.06 * h))
        cx, cy = x0 + 0.18 * w, y0 + 0.42 * h
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=dark)
    elif kind == "kite":
        draw.line([(x0 + w / 2, y0), (x0 + w / 2, y1 - 1)], fill=dark)
        draw.line([(x0, y0 + 0.4 * h), (x1 - 1, y0 + 0.4 * h)], fill=dark)


def render_scene(scene: Scene, *, image_size: int) -> Image.Image:
    """Draw a scene: background, then each object (dark outline, textured silhouette, details)."""
    img = render_background(scene.background, scene.background_rgb, image_size=image_size,
                            texture_seed=scene.texture_seed)
    draw = ImageDraw.Draw(img)
    for inst in scene.instances:
        group = scene.groups[inst.group]
        x0, y0, x1, y1 = inst.box
        w, h = x1 - x0, y1 - y0
        mask = shape_mask(group.kind, w, h)
        # outline: the silhouette grown by one pixel, pasted under the object
        pad = Image.new("L", (w + 2, h + 2), 0)
        pad.paste(mask, (1, 1))
        outline = pad.filter(ImageFilter.MaxFilter(3))
        img.paste(Image.new("RGB", outline.size, _OUTLINE), (x0 - 1, y0 - 1), outline)
        patch = Image.fromarray(texture_patch(group.kind, group.texture, inst.rgb, w, h), "RGB")
        img.paste(patch, (x0, y0), mask)
        _details(group.kind, draw, inst.box, inst.rgb)
    return img
