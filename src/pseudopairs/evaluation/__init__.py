"""The evaluation stage (paper §3.3, §7.1): the ``evaluate`` step
(:mod:`~pseudopairs.evaluation.step`) on the exact retrieval ranks and metrics of the shared
similarity engine (:mod:`~pseudopairs.similarity.ranks`, :mod:`~pseudopairs.similarity.metrics`:
R@K, median rank, Sum, Sum(Sum), translation R@1), which training's validation uses too — they
live in :mod:`pseudopairs.similarity` so that no earlier stage imports this one. Their public
names are importable from here as before; they are loaded on first use, so the stage's
contract (:mod:`~pseudopairs.evaluation.contract`, read when the workflow is parsed) imports
no torch."""

_METRICS = ("METRIC_KEYS", "RECALL_KEYS", "RECALL_KS", "language_sum", "median_rank", "metrics_from_ranks",
            "recall_at", "retrieval_metrics", "retrieval_metrics_reference", "sum_of_sums",
            "translation_retrieval")
_RANKS = ("RetrievalRanks", "retrieval_ranks", "retrieval_ranks_reference", "translation_ranks",
          "translation_ranks_reference")

__all__ = sorted(_METRICS + _RANKS)


def __getattr__(name: str):
    if name in _METRICS:
        from pseudopairs.similarity import metrics

        return getattr(metrics, name)
    if name in _RANKS:
        from pseudopairs.similarity import ranks

        return getattr(ranks, name)
    raise AttributeError(f"module 'pseudopairs.evaluation' has no attribute {name!r}")
