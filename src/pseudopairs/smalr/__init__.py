"""SMALR (paper 002, Burns et al. 2020, "Learning to Scale Multilingual Representations for
Vision-Language Tasks"): its components, and the pipeline steps that use them (docs/smalr.md says
what runs and what is still missing). The model side is in :mod:`pseudopairs.model`: the ``hem``
text encoder (:mod:`~pseudopairs.model.text_encoders`) and the ``smalr`` objective
(:mod:`~pseudopairs.model.smalr_objective`).

- :mod:`~pseudopairs.smalr.paper` — the numbers 002 states, and those our copy leaves blank;
- :mod:`~pseudopairs.smalr.triplet` — Eq. (1) / Eq. (3): cosine triplet losses, top-K most
  violated negatives;
- :mod:`~pseudopairs.smalr.hem` — the Hybrid Embedding Model (§3.1): vocabulary split, PCA,
  latent assignment, :class:`~pseudopairs.smalr.hem.HybridEmbedding`, parameter counts;
- :mod:`~pseudopairs.smalr.hem_pretrain` — HEM's pretraining of the latent vocabulary (§3.1);
- :mod:`~pseudopairs.smalr.mclm` — Masked Cross-Language Modelling (§3.2, §7.4);
- :mod:`~pseudopairs.smalr.constraints` — MULE's constraints (§3.3): neighbourhood triplets,
  the adversarial language classifier behind a gradient reversal, Eq. (3);
- :mod:`~pseudopairs.smalr.clc` — Cross-Lingual Consistency (§3.4): CLC-A, CLC-C;
- :mod:`~pseudopairs.smalr.fasttext` — FastText vectors: trained with gensim (optional extra
  ``smalr``), and the reader/writer of ``.vec`` text files;
- :mod:`~pseudopairs.smalr.settings`, :mod:`~pseudopairs.smalr.step` — the ``fasttext`` and
  ``pretrain_hem`` steps: settings and commands ``train-fasttext`` and ``pretrain-hem`` (their
  inputs from the config: :mod:`pseudopairs.model.smalr_contract`);
- :mod:`~pseudopairs.smalr.clc_text`, :mod:`~pseudopairs.smalr.clc_contract` — CLC's translation
  models' parallel text and its rules' inputs (its evaluation: :mod:`pseudopairs.evaluation.clc`);
- :mod:`~pseudopairs.smalr.augment` — 002's augmented training set (§4).

The package is a library of paper 002's parts: it imports no later stage (the model, the
evaluation), which import it (tests/test_architecture.py checks packages import in one direction).
"""
