"""The window covariance of :class:`~shiftwatch.operators.riemannian.transforms.WindowCovariance`
as one compiled function, shared by the record path and the replay's columnar path.

:func:`cov_windows` computes the shrunk covariance of each window ``x[e - window:e]`` for the
window ends ``e`` it is given, with explicit loops in a fixed order (the mean a running sum
over the rows, then ``c^T c`` entry by entry), so that one window gives the same bits whether
it is computed alone (``WindowCovariance._point``, a record at a time) or among many (the
columnar path's :mod:`~shiftwatch.operators.riemannian.columns`, a key's windows at once).
"""

from __future__ import annotations

import numpy as np

from shiftwatch._jit import njit

__all__ = ["cov_windows"]


@njit(cache=True)
def cov_windows(x, ends, window, shrinkage, min_eig):  # pragma: no cover - compiled
    """The points of the windows ending (exclusive) at ``ends`` of the rows ``x`` (n, d):
    ``(1 - shrinkage) S + (shrinkage tr(S) / d + min_eig) I``, symmetrised, ``S`` the sample
    covariance of the window; an array (len(ends), d, d)."""
    d = x.shape[1]
    k = ends.shape[0]
    out = np.empty((k, d, d))
    mean = np.empty(d)
    c = np.empty((window, d))
    s = np.empty((d, d))
    for w in range(k):
        lo = ends[w] - window
        for j in range(d):
            mean[j] = 0.0
        for i in range(window):
            for j in range(d):
                mean[j] += x[lo + i, j]
        for j in range(d):
            mean[j] = mean[j] / window
        for i in range(window):
            for j in range(d):
                c[i, j] = x[lo + i, j] - mean[j]
        tr = 0.0
        for a in range(d):
            for b in range(d):
                acc = 0.0
                for i in range(window):
                    acc += c[i, a] * c[i, b]
                s[a, b] = acc / (window - 1)
            tr += s[a, a]
        diag = shrinkage * tr / d + min_eig
        for a in range(d):
            for b in range(d):
                s[a, b] = (1.0 - shrinkage) * s[a, b]
            s[a, a] += diag
        for a in range(d):
            for b in range(d):
                out[w, a, b] = 0.5 * (s[a, b] + s[b, a])
    return out
