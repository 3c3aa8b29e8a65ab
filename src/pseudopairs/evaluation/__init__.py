"""The evaluation stage (paper §3.3, §7.1): exact retrieval ranks on the shared similarity engine
(:mod:`~pseudopairs.evaluation.ranks`), the metrics (:mod:`~pseudopairs.evaluation.metrics`:
R@K, median rank, Sum, Sum(Sum), translation R@1) and the ``evaluate`` step
(:mod:`~pseudopairs.evaluation.step`)."""

from pseudopairs.evaluation.metrics import (METRIC_KEYS, RECALL_KEYS, RECALL_KS, language_sum,
                                            median_rank, metrics_from_ranks, recall_at,
                                            retrieval_metrics, retrieval_metrics_reference,
                                            sum_of_sums, translation_retrieval)
from pseudopairs.evaluation.ranks import (RetrievalRanks, retrieval_ranks, retrieval_ranks_reference,
                                          translation_ranks, translation_ranks_reference)

__all__ = ["METRIC_KEYS", "RECALL_KEYS", "RECALL_KS", "RetrievalRanks", "language_sum", "median_rank",
           "metrics_from_ranks", "recall_at", "retrieval_metrics", "retrieval_metrics_reference",
           "retrieval_ranks", "retrieval_ranks_reference", "sum_of_sums", "translation_ranks",
           "translation_ranks_reference", "translation_retrieval"]
