"""The pseudopair stage (paper §2.2, §7.2): the exact blocked search
(:mod:`~pseudopairs.mining.search`) under a registered criterion
(:mod:`~pseudopairs.mining.criteria`), the ``mine`` and ``pseudopair-captions`` steps
(:mod:`~pseudopairs.mining.step`) and the hubness diagnostics and §7.2 statistics
(:mod:`~pseudopairs.mining.statistics`). The pair-file format is :data:`pseudopairs.core.io.PAIR_COLUMNS`.

``pseudopairs.mining.nearest_neighbours`` is the public search (numpy and the engine only: no
torch, no pandas at import)."""

from pseudopairs.mining.criteria import CRITERIA
from pseudopairs.mining.search import (cosine_matrix64, nearest_neighbours,
                                       nearest_neighbours_reference, pair_cosines, topk_mean)

__all__ = ["CRITERIA", "cosine_matrix64", "nearest_neighbours", "nearest_neighbours_reference",
           "pair_cosines", "topk_mean"]
