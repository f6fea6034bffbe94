"""Scores for change detectors and continual learners. Pure functions of lists and arrays.

Change points and alarms are 0-based positions in one series: a change point ``t`` means the
new regime starts at sample ``t``.

* :func:`f_measure` and :func:`covering` follow TCPDBench (van den Burg & Williams, 2020)
  exactly, so that scores are comparable with its published tables.
* :func:`detection_summary` scores against a known truth: detection delays, false alarms,
  missed changes and the average run length to a false alarm.
* :func:`prequential_accuracy`, :func:`accuracy_matrix`, :func:`forgetting` and
  :func:`average_accuracy` score learners (Chaudhry et al., 2018).

References
----------
G. J. J. van den Burg and C. K. I. Williams, "An evaluation of change point detection
algorithms", arXiv:2003.06222, 2020. Code: github.com/alan-turing-institute/TCPDBench.

A. Chaudhry, P. K. Dokania, T. Ajanthan and P. H. S. Torr, "Riemannian Walk for Incremental
Learning: Understanding Forgetting and Intransigence", ECCV 2018.
"""

from __future__ import annotations

import bisect
import itertools
import math
import numbers
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "true_positives",
    "f_measure",
    "covering",
    "detection_summary",
    "prequential_accuracy",
    "AccuracyMatrix",
    "accuracy_matrix",
    "evaluation_triples",
    "forgetting",
    "average_accuracy",
]


# --------------------------------------------------------------------------------------
# Change points: TCPDBench F1 and covering
# --------------------------------------------------------------------------------------


def _index(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"{what} must be integer positions, got {x!r}")
    i = int(x)
    if i != x:
        raise ValueError(f"{what} must be integer positions, got {x!r}")
    return i


def _positions(xs: Iterable[Any], what: str) -> list[int]:
    return sorted({_index(x, what) for x in xs})


def _annotator_lists(
    annotations: Mapping[Any, Iterable[int]] | Sequence[int],
) -> list[list[int]]:
    # Positions as ints, each annotator's list in its given order (the order TCPDBench builds
    # its sets in). A bare sequence is one annotator.
    groups = annotations.values() if isinstance(annotations, Mapping) else [annotations]
    lists = [[_index(c, "annotations") for c in cps] for cps in groups]
    if not lists:
        raise ValueError("annotations must hold at least one annotator")
    return lists


def true_positives(truth: Iterable[int], predictions: Iterable[int], margin: int = 5) -> set[int]:
    """The true change points matched by a prediction within ``margin``.

    True change points are visited in the iteration order of ``truth``; each takes the
    closest prediction still unmatched with ``|t - x| <= margin`` (on a tie, the earlier
    prediction). A prediction matches at most one true change point, so two true points
    close together need two predictions, and when they compete for one prediction the
    order of visit decides. TCPDBench visits a Python ``set``; pass a sorted list to visit
    in increasing order.

    Examples
    --------
    >>> sorted(true_positives({1, 10, 20, 23}, {3, 8, 20}))
    [1, 10, 20]
    >>> true_positives([10, 12], [11]), true_positives([12, 10], [11])
    ({10}, {12})
    """
    remaining = _positions(predictions, "predictions")
    matched = set()
    for t in dict.fromkeys(_index(c, "true change points") for c in truth):
        lo = bisect.bisect_left(remaining, t - margin)
        hi = bisect.bisect_right(remaining, t + margin)
        if lo == hi:
            continue
        best = min(range(lo, hi), key=lambda i: (abs(remaining[i] - t), remaining[i]))
        matched.add(t)
        del remaining[best]
    return matched


def f_measure(
    annotations: Mapping[Any, Iterable[int]] | Sequence[int],
    predictions: Iterable[int],
    margin: int = 5,
    return_PR: bool = False,
    match_order: str = "tcpdbench",
) -> float | tuple[float, float, float]:
    """TCPDBench's F1 score of predicted change points against several annotators.

    Index 0 is added to every annotation set and to the predictions (the start of the
    series counts as a change point, which every method "detects"). Then

    * precision ``P`` = #(predictions matching the union of the annotations) / #predictions;
    * recall ``R`` = mean over annotators ``k`` of #(matched points of ``k``) / #(points of k);
    * ``F = 2 P R / (P + R)``,

    with matching as in :func:`true_positives`. Duplicate positions count once.

    Parameters
    ----------
    annotations
        ``{annotator: [positions]}``, or one list of positions for a single annotator.
    predictions
        Predicted change points (alarm positions).
    margin
        The largest distance at which a prediction matches a change point.
    return_PR
        Return ``(F, P, R)`` instead of ``F``.
    match_order
        The order in which true change points claim predictions, which matters only when
        two of them compete for one prediction. ``"tcpdbench"``: the iteration order of the
        Python sets TCPDBench builds (each annotator's list, then 0, in a ``set``; the union
        in annotator order), which reproduces its published numbers; for integers this is
        mostly, not always, increasing. ``"ascending"``: increasing position.

    Examples
    --------
    >>> f_measure({1: [10, 20], 2: [11, 20], 3: [10], 4: [0, 5]}, [10, 20])
    1.0
    >>> f_measure({1: [], 2: [10], 3: [50]}, [10])  # P = 1, R = (1 + 1 + 1/2) / 3
    0.9090909090909091
    >>> f_measure({1: [], 2: [10], 3: [50]}, [], return_PR=True)  # the "zero" method
    (0.8, 1.0, 0.6666666666666666)
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin!r}")
    if match_order not in ("tcpdbench", "ascending"):
        raise ValueError(f"match_order must be 'tcpdbench' or 'ascending', got {match_order!r}")
    truth_sets: list[Iterable[int]] = []
    for cps in _annotator_lists(annotations):
        # Built exactly as TCPDBench builds it, so that iterating it visits the same order.
        tk = set(cps)
        tk.add(0)
        truth_sets.append(tk)
    union: set[int] = set()
    for tk in truth_sets:
        for t in tk:
            union.add(t)
    sizes = [len(tk) for tk in truth_sets]
    union_order: Iterable[int] = union
    if match_order == "ascending":
        truth_sets = [sorted(tk) for tk in truth_sets]
        union_order = sorted(union)
    preds = set(_positions(predictions, "predictions")) | {0}
    precision = len(true_positives(union_order, preds, margin)) / len(preds)
    recall = sum(
        len(true_positives(tk, preds, margin)) / size
        for tk, size in zip(truth_sets, sizes, strict=True)
    ) / len(truth_sets)
    # Index 0 is always a match, so P > 0 and R > 0.
    f = 2 * precision * recall / (precision + recall)
    return (f, precision, recall) if return_PR else f


def _segments(cps: Iterable[int], n_obs: int) -> list[tuple[int, int]]:
    """Half-open segments [start, stop) of 0..n_obs-1 cut at the change points."""
    positions = _positions(cps, "change points")
    if positions and positions[0] < 0:
        raise ValueError(f"change points must be >= 0, got {positions[0]}")
    cuts = [c for c in positions if 0 < c < n_obs]
    bounds = [0, *cuts, n_obs]
    return list(itertools.pairwise(bounds))


def _cover_single(truth: list[tuple[int, int]], pred: list[tuple[int, int]], n_obs: int) -> float:
    # Segments are intervals, so the Jaccard index is |overlap| / |union| of two intervals,
    # and only predicted segments overlapping R can give a positive value.
    pred_stops = [b for _, b in pred]
    total = 0.0
    for a, b in truth:
        i = bisect.bisect_right(pred_stops, a)
        best = 0.0
        while i < len(pred) and pred[i][0] < b:
            pa, pb = pred[i]
            inter = min(b, pb) - max(a, pa)
            best = max(best, inter / ((b - a) + (pb - pa) - inter))
            i += 1
        total += (b - a) * best
    return total / n_obs


def covering(
    annotations: Mapping[Any, Iterable[int]] | Sequence[int], predictions: Iterable[int], n_obs: int
) -> float:
    """TCPDBench's segmentation covering of the annotations by the predictions.

    Each set of change points cuts ``0 .. n_obs-1`` into segments (positions 0 and
    ``n_obs`` are always boundaries; points ``>= n_obs`` are ignored). For annotator ``k``,
    ``C_k = sum_R |R| max_R' J(R, R') / n_obs`` over its segments ``R`` and the predicted
    segments ``R'``, with ``J`` the Jaccard index. The result is the mean of ``C_k``.

    Examples
    --------
    >>> covering({1: [10, 20], 2: [10], 3: [0, 5]}, [10, 20], 45)
    0.7962962962962963
    >>> covering([3, 5], [], 8)  # segments 3, 2, 3 vs all 8: (3*3 + 2*2 + 3*3) / 8 / 8
    0.34375
    """
    n_obs = _index(n_obs, "n_obs")
    if n_obs < 1:
        raise ValueError(f"n_obs must be >= 1, got {n_obs}")
    pred = _segments(predictions, n_obs)
    covers = [
        _cover_single(_segments(s, n_obs), pred, n_obs) for s in _annotator_lists(annotations)
    ]
    return sum(covers) / len(covers)


# --------------------------------------------------------------------------------------
# Change points: delays, false alarms, run length
# --------------------------------------------------------------------------------------


def detection_summary(alarms: Iterable[int], change_points: Iterable[int], n: int) -> dict:
    """Score alarms against known change points: delays, false alarms, run length.

    Definitions (positions are 0-based; change point ``c_k`` starts regime ``k``, regime
    ``k`` lasts until ``c_{k+1}`` or ``n``):

    * The **detection** of change ``k`` is the first alarm in ``[c_k, c_{k+1})``; its
      **delay** is ``alarm - c_k`` (0 when the alarm is at the change point). A change with
      no alarm in its regime is **missed**.
    * Every other alarm is a **false alarm**: alarms before the first change point, and
      alarms after the detection of the change of their regime.
    * **No-change samples** are the samples during which no change is pending: all ``n``
      samples except, for each detected change, ``c_k .. detection`` (``delay + 1``
      samples), and for each missed change its whole regime. All false alarms fall in them.
    * **Average run length** (to a false alarm) = no-change samples / false alarms, the
      usual estimate of ARL0 for a detector that restarts after each alarm; ``inf`` when
      there is no false alarm. With no change points it is ``n / #alarms``.

    Change point 0 is ignored (there is no pre-change data).

    Returns
    -------
    dict
        ``change_points``, ``detections`` (alarm position or None per change), ``delays``
        (int or None per change), ``n_detected``, ``n_missed``, ``false_alarms``
        (positions), ``n_false_alarms``, ``mean_delay`` (None if nothing detected),
        ``no_change_samples``, ``average_run_length`` and ``first_alarm`` (None if none).

    Examples
    --------
    >>> s = detection_summary([30, 104, 112, 180], change_points=[100, 200], n=300)
    >>> s["delays"], s["false_alarms"], s["n_missed"], s["mean_delay"]
    ([4, None], [30, 112, 180], 1, 4.0)
    >>> s["no_change_samples"], s["average_run_length"]  # 300 - 5 - 100 = 195 samples
    (195, 65.0)
    """
    n = _index(n, "n")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    alarm_pos = _positions(alarms, "alarms")
    cps = _positions(change_points, "change points")
    if alarm_pos and (alarm_pos[0] < 0 or alarm_pos[-1] >= n):
        raise ValueError(f"alarms must lie in [0, {n}), got {alarm_pos[0]}..{alarm_pos[-1]}")
    if cps and (cps[0] < 0 or cps[-1] >= n):
        raise ValueError(f"change points must lie in [0, {n}), got {cps[0]}..{cps[-1]}")
    cps = [c for c in cps if c > 0]

    bounds = [*cps, n]
    detections: list[int | None] = []
    detected_alarms = set()
    pending = 0  # samples with a change waiting to be detected
    for k, c in enumerate(cps):
        i = bisect.bisect_left(alarm_pos, c)
        if i < len(alarm_pos) and alarm_pos[i] < bounds[k + 1]:
            detections.append(alarm_pos[i])
            detected_alarms.add(alarm_pos[i])
            pending += alarm_pos[i] - c + 1
        else:
            detections.append(None)
            pending += bounds[k + 1] - c
    false_alarms = [a for a in alarm_pos if a not in detected_alarms]
    delays = [None if d is None else d - c for d, c in zip(detections, cps, strict=True)]
    found = [d for d in delays if d is not None]
    no_change = n - pending
    return {
        "change_points": cps,
        "detections": detections,
        "delays": delays,
        "n_detected": len(found),
        "n_missed": len(cps) - len(found),
        "false_alarms": false_alarms,
        "n_false_alarms": len(false_alarms),
        "mean_delay": sum(found) / len(found) if found else None,
        "no_change_samples": no_change,
        "average_run_length": no_change / len(false_alarms) if false_alarms else math.inf,
        "first_alarm": alarm_pos[0] if alarm_pos else None,
    }


# --------------------------------------------------------------------------------------
# Learners
# --------------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Label equality that also works for NumPy scalars and arrays (all entries equal)."""
    if a is None or b is None:
        return False
    try:
        eq = a == b
    except (TypeError, ValueError):
        return False
    if isinstance(eq, (bool, np.bool_)):
        return bool(eq)
    try:
        return bool(np.all(eq)) and np.shape(a) == np.shape(b)
    except (TypeError, ValueError):
        return False


def prequential_accuracy(
    y_true: Sequence[Any], y_pred: Sequence[Any], window: int | None = None
) -> np.ndarray:
    """Prequential (test-then-train) accuracy after each sample.

    ``curve[t]`` is the fraction of correct predictions among samples ``0..t``
    (``window=None``) or among the last ``window`` samples up to ``t``.

    Examples
    --------
    >>> prequential_accuracy([1, 0, 1, 1], [1, 1, 1, 0]).tolist()
    [1.0, 0.5, 0.6666666666666666, 0.5]
    >>> prequential_accuracy([1, 0, 1, 1], [1, 1, 1, 0], window=2).tolist()
    [1.0, 0.5, 0.5, 0.5]
    """
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true and y_pred differ in length: {len(y_true)} != {len(y_pred)}")
    if window is not None and (not isinstance(window, numbers.Integral) or window < 1):
        raise ValueError(f"window must be None or an integer >= 1, got {window!r}")
    correct = np.array([_same(a, b) for a, b in zip(y_true, y_pred, strict=True)], dtype=np.float64)
    hits = np.cumsum(correct)
    t = np.arange(1, len(correct) + 1, dtype=np.float64)
    if window is None:
        return hits / t
    lagged = np.concatenate([np.zeros(window), hits])[: len(hits)]
    return (hits - lagged) / np.minimum(t, window)


class AccuracyMatrix(NamedTuple):
    """``R[i, j]``: accuracy on task ``tasks[j]`` measured after training through ``tasks[i]``.

    ``R`` and ``counts`` are ``T x T`` arrays; entries without evaluations are NaN in ``R``.
    """

    tasks: list
    R: np.ndarray
    counts: np.ndarray


def accuracy_matrix(
    evaluations: Iterable[Mapping | Sequence], tasks: Sequence | None = None
) -> AccuracyMatrix:
    """Build the task accuracy matrix from evaluation triples or from a learner's outputs.

    Each item is either a triple ``(trained_through, task, correct)`` or an output record
    (a mapping) with

    * ``task`` — the task of the evaluated sample (records without it are skipped);
    * ``correct`` (bool), or ``y`` and ``y_pred`` (records lacking a label are skipped);
    * ``trained_through`` (optional) — the last task the model had trained on when it made
      the prediction. When absent: a record the model trains on (it has a label and no
      ``"train": False``) was predicted while training its own task, so it counts on the
      diagonal; an evaluation-only record (``"train": False``) counts in the row of the
      task of the latest earlier training record (its own task if there is none). The
      records must then be in processing order for one learner (one key).

    So a test-then-train stream fills the diagonal (accuracy while learning each task), and
    evaluation records of earlier tasks, emitted after a later task was trained, fill the
    rows below it. A task trained again later accumulates into the same row.

    Parameters
    ----------
    evaluations
        Triples or records, as above.
    tasks
        The task order (rows and columns). Default: order of first appearance as a
        trained-through task, then tasks only ever evaluated, in order of appearance.

    Examples
    --------
    >>> stream = ([{"task": "A", "y": 1, "y_pred": 1}] * 2
    ...           + [{"task": "B", "y": 0, "y_pred": 0}, {"task": "B", "y": 0, "y_pred": 1}]
    ...           + [{"task": "A", "y": 1, "y_pred": 0, "train": False}])
    >>> m = accuracy_matrix(stream)
    >>> m.tasks, m.R.tolist(), m.counts.tolist()
    (['A', 'B'], [[1.0, nan], [0.0, 0.5]], [[2, 0], [1, 2]])
    """
    triples = evaluation_triples(evaluations)
    if tasks is None:
        order: dict = {}
        for through, _, _ in triples:
            order.setdefault(through, None)
        for _, task, _ in triples:
            order.setdefault(task, None)
        task_list = list(order)
    else:
        task_list = [_hashable(t) for t in tasks]
    where = {t: i for i, t in enumerate(task_list)}
    size = len(task_list)
    hits = np.zeros((size, size))
    counts = np.zeros((size, size), dtype=np.int64)
    for through, task, correct in triples:
        if through in where and task in where:
            counts[where[through], where[task]] += 1
            hits[where[through], where[task]] += correct
    with np.errstate(invalid="ignore", divide="ignore"):
        R = np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)
    return AccuracyMatrix(task_list, R, counts)


def evaluation_triples(
    evaluations: Iterable[Mapping | Sequence],
) -> list[tuple[Hashable, Hashable, bool]]:
    """The ``(trained_through, task, correct)`` triples :func:`accuracy_matrix` counts.

    Records are read, and ``trained_through`` inferred, as :func:`accuracy_matrix` says;
    triples pass through. Useful to pool several learners (keys): infer per key, then
    concatenate.

    Examples
    --------
    >>> evaluation_triples([{"task": 0, "y": 1, "y_pred": 1}, {"task": 1, "y": 1, "y_pred": 0},
    ...                     {"task": 1, "y": 0, "y_pred": 0}, (1, 0, True)])
    [(0, 0, True), (1, 1, False), (1, 1, True), (1, 0, True)]
    """
    triples: list[tuple[Hashable, Hashable, bool]] = []
    trained: Any = _UNSET
    for item in evaluations:
        if not isinstance(item, Mapping):
            through, task, correct = item
            triples.append((_hashable(through), _hashable(task), bool(correct)))
            continue
        task = item.get("task")
        if task is None:
            continue
        labelled = "correct" in item or item.get("y") is not None
        trains = labelled and item.get("train", True) is not False
        if "correct" in item or (labelled and item.get("y_pred") is not None):
            correct = (
                bool(item["correct"]) if "correct" in item else _same(item["y"], item["y_pred"])
            )
            through = item.get("trained_through")
            if through is None:
                through = task if trains or trained is _UNSET else trained
            triples.append((_hashable(through), _hashable(task), correct))
        if trains:
            trained = task
    return triples


_UNSET: Any = object()


def _hashable(x: Any) -> Any:
    return tuple(_hashable(v) for v in x) if isinstance(x, list) else x


def _as_matrix(R: Any) -> np.ndarray:
    if isinstance(R, AccuracyMatrix):
        R = R.R
    arr = (
        np.array([[np.nan if v is None else v for v in row] for row in R], dtype=np.float64)
        if not isinstance(R, np.ndarray)
        else R.astype(np.float64)
    )
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
        raise ValueError(f"R must be a square matrix, got shape {arr.shape}")
    return arr


def forgetting(R: Any) -> float:
    """Average forgetting after the last task (Chaudhry et al., 2018).

    With ``T`` tasks in training order, ``f_j = max_{j <= i < T-1} R[i][j] - R[T-1][j]``
    for each task ``j < T-1``, and the result is the mean of the ``f_j``. Rows ``i < j``
    (accuracy on a task not yet trained) are not counted, as in Chaudhry et al.'s
    class-incremental setting where they are never measured. Missing entries (NaN or None)
    are skipped; a task whose last-row entry or all earlier entries are missing is left
    out. NaN when no task can be scored (e.g. ``T < 2``).

    Examples
    --------
    >>> R = [[0.9, 0.95, 0.0],
    ...      [0.7, 0.8, 0.2],
    ...      [0.6, 0.5, 0.9]]
    >>> round(forgetting(R), 6)  # ((0.9 - 0.6) + (0.8 - 0.5)) / 2; R[0][1] is not counted
    0.3
    """
    arr = _as_matrix(R)
    size = arr.shape[0]
    drops = []
    for j in range(size - 1):
        before = arr[j : size - 1, j]
        before = before[~np.isnan(before)]
        last = arr[size - 1, j]
        if before.size and not np.isnan(last):
            drops.append(float(before.max() - last))
    return float(np.mean(drops)) if drops else math.nan


def average_accuracy(R: Any) -> float:
    """Mean accuracy over all tasks after training the last one: the mean of ``R[T-1]``.

    Missing entries are skipped; NaN if the last row has none.

    Examples
    --------
    >>> round(average_accuracy([[0.9, None], [0.7, 0.8]]), 6)
    0.75
    """
    arr = _as_matrix(R)
    if arr.shape[0] == 0:
        return math.nan
    last = arr[-1][~np.isnan(arr[-1])]
    return float(last.mean()) if last.size else math.nan
