"""pseudopairs: reproduce *Bootstrapping Disjoint Datasets for Multilingual Multimodal
Representation Learning* (Kádár et al.) as a Snakemake pipeline."""

__version__ = "0.1.0"
