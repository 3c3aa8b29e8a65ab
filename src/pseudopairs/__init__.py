"""pseudopairs: reproduce *Bootstrapping Disjoint Datasets for Multilingual Multimodal
Representation Learning* (Kádár et al.) as a Snakemake pipeline."""

__version__ = "0.1.0"


def load(folder, *, device: str = "cpu"):
    """A model exported by ``pseudopairs export``, ready to encode raw sentences and images:
    ``model.encode_texts(["un chien court"], lang="fr")``, ``model.encode_images(paths)``,
    ``model.languages``, ``model.dim`` (:class:`pseudopairs.search.model.SearchModel`)."""
    from pseudopairs.search.model import load as _load

    return _load(folder, device=device)
