"""The offline demo world: rendered scenes of coloured objects with English and German
captions from a grammar (and French and Czech translations in the task1-like set).

Two corpora:

- ``m30k``: Multi30K-like; per image 5 English + 5 German captions drawn independently
  (comparable, like task2), plus ``m30k_task1``: one caption spec realised in English, German,
  French and Czech per image (parallel, like task1 with its translations), over the same images;
- ``coco``: COCO-like, English only, scenes from a shifted distribution: some object kinds occur
  only in ``coco`` (kite, fish), some only in ``m30k`` (flag, egg), and the proportions of kinds and
  backgrounds differ.

Every kind has a characteristic silhouette and aspect ratio, a small set of textures and a
palette, objects are drawn large, and captions talk about kind, colour, size, texture, count and
background, never positions. The demo's image features come from a ResNet pretrained on further
scenes of this world (:mod:`pseudopairs.features.pretraining`), which sees all of these.

Everything is a pure function of the seed: each image draws from its own generator derived from
(seed, corpus, split, index, purpose), so results do not depend on generation order or on the
sizes of other splits.

Modules: :mod:`~.content` (what the world shows), :mod:`~.settings` (the ``world`` section),
:mod:`~.scene` (drawing scenes), :mod:`~.render` (images), :mod:`~.grammar` (caption specs and the
registry of languages), one module per language (:mod:`~.english`, :mod:`~.german`,
:mod:`~.french`, :mod:`~.czech`), and
:mod:`~.generate` (the ``world`` and ``world-parallel`` steps).
"""
