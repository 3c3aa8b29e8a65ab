"""``csls`` (Conneau et al. 2018, cross-domain similarity local scaling; beyond the paper)."""

from __future__ import annotations

import numpy as np

from pseudopairs.mining.criteria import Criterion, whole_number, register
from pseudopairs.mining.search import (argmax_reference, column_offset_error, knearest_means,
                                       knearest_means_reference, subtract_columns, transformed_argmax)


def search(ctx, params: dict) -> tuple[np.ndarray, np.ndarray]:
    r_q, r_d = knearest_means(ctx, params["k"], "csls (k-nearest)")
    # argmax of 2·cos − r_q − r_d per query = argmax of cos − r_d/2 (r_q is constant in a row)
    half32 = (r_d / 2).astype(np.float32)
    err, scale = column_offset_error(ctx, half32)
    return transformed_argmax(
        ctx, transform=subtract_columns(half32), err=err, scale=scale, desc="csls (argmax)",
        exact_of=lambda lines, others: (2.0 * ctx.cos_of(lines, others) - r_q[lines]) - r_d[others])


def reference(cos: np.ndarray, params: dict) -> tuple[np.ndarray, np.ndarray]:
    r_q, r_d = knearest_means_reference(cos, params["k"])
    return argmax_reference((2.0 * cos - r_q[:, None]) - r_d[None, :])


register(Criterion(
    name="csls", search=search, reference=reference,
    params=(whole_number("k", 10, neighbourhood=True),),
    summary="cross-domain similarity local scaling (Conneau et al. 2018)",
    definition="argmax_d (2·cos(q, d) − r_q(q)) − r_d(d), r_q = mean cosine of q's k nearest "
               "database rows, r_d = mean cosine of d's k nearest queries; score = that value"))
