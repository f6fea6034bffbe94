"""Detection scores of one run: change points merged across annotators, alarms and
located changes scored (F1, covering, delays, false alarms), per key and pooled.

Positions are 0-based positions in each key's own series (see
:mod:`shiftwatch.sinks.evaluation`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shiftwatch.sinks.metrics import (
    covering,
    detection_summary,
    f_measure,
)

__all__ = ["merge_change_points", "evaluate_detector", "evaluate_locations", "located_positions",
           "pool_detectors"]


def merge_change_points(
    annotations: Mapping[Any, Iterable[int]] | Sequence[int] | None, margin: int = 5
) -> list[int]:
    """One list of true change points from several annotators.

    The union of all annotators' points, sorted, where a point at most ``margin`` after the
    previous kept point is taken as the same change and dropped (annotators rarely agree to
    the sample). Position 0 is dropped.

    Examples
    --------
    >>> merge_change_points({"a": [100, 250], "b": [103, 400], "c": [0]})
    [100, 250, 400]
    """
    if annotations is None:
        return []
    sets = annotations.values() if isinstance(annotations, Mapping) else [annotations]
    kept: list[int] = []
    for c in sorted({int(c) for s in sets for c in s}):
        if c > 0 and (not kept or c - kept[-1] > margin):
            kept.append(c)
    return kept


def evaluate_detector(
    alarms: Iterable[int],
    annotations: Mapping[Any, Iterable[int]] | Sequence[int] | None,
    n: int,
    margin: int = 5,
) -> dict:
    """Score the alarms of one series: TCPD F1 and covering, delays, false alarms, ARL.

    Parameters
    ----------
    alarms
        Alarm positions in the series (0-based).
    annotations
        ``{annotator: [change points]}``, one list of change points, or None (unknown).
        Change points at or beyond ``n`` (not reached yet) are left out of every score.
    n
        The length of the series.
    margin
        The F1 margin (TCPDBench: 5) and the merge distance of :func:`merge_change_points`.

    Returns
    -------
    dict
        ``n``, ``alarms``, ``n_alarms``, ``f1``, ``precision``, ``recall``, ``covering``
        (None without annotations), ``margin``, ``f1_1pct`` (the same F1 with a margin of
        ``int(0.01 * n)``: the TSSB / ClaSS convention), ``margin_1pct``, ``change_points``
        (the merged truth, inside the series) and ``detection``:
        :func:`~shiftwatch.sinks.metrics.detection_summary` against those change points (its
        ``average_run_length`` is ``inf`` when there is no false alarm).

    Examples
    --------
    >>> r = evaluate_detector([52, 130], {"a": [50], "b": [48, 150]}, n=200)
    >>> r["precision"], r["recall"]  # P = 2/3 (0 and 52), R = (2/2 + 2/3) / 2
    (0.6666666666666666, 0.8333333333333333)
    >>> round(r["f1"], 4), r["change_points"], r["detection"]["delays"]
    (0.7407, [48, 150], [4, None])
    >>> r["margin_1pct"], round(r["f1_1pct"], 4)  # margin 2: 52 still meets a's 50, not b's 48
    (2, 0.6667)
    >>> evaluate_detector([], None, n=10)["detection"]["average_run_length"]
    inf
    """
    n = int(n)
    alarm_list = sorted({int(a) for a in alarms})
    out: dict[str, Any] = {
        "n": n,
        "alarms": alarm_list,
        "n_alarms": len(alarm_list),
        "f1": None,
        "precision": None,
        "recall": None,
        "covering": None,
        "margin": margin,
        "f1_1pct": None,
        "margin_1pct": int(0.01 * n),
    }
    if annotations is not None and not isinstance(annotations, Mapping):
        annotations = {"0": list(annotations)}
    if annotations is not None and len(annotations) == 0:
        annotations = None
    if annotations is not None and n > 0:
        # Change points the series never reached (an interrupted or partial replay) cannot be
        # detected; every score leaves them out, as the detection summary below does.
        reached = {k: [int(c) for c in v if int(c) < n] for k, v in annotations.items()}
        f, p, r = f_measure(reached, alarm_list, margin=margin, return_PR=True)
        out.update(f1=f, precision=p, recall=r, covering=covering(reached, alarm_list, n),
                   f1_1pct=f_measure(reached, alarm_list, margin=out["margin_1pct"]))
    truth = [c for c in merge_change_points(annotations, margin) if c < n]
    out["change_points"] = truth
    out["detection"] = detection_summary(alarm_list, truth, n) if n > 0 else None
    return out


def evaluate_locations(
    located: Iterable[int],
    annotations: Mapping[Any, Iterable[int]] | Sequence[int] | None,
    n: int,
    margin: int = 5,
) -> dict:
    """Score located change points: TCPD F1 and covering, and the location error.

    The same F1 and covering as :func:`evaluate_detector`, of the ``change_at`` positions
    instead of the alarm positions, plus ``mean_abs_error``: the mean over located points of
    the distance to the nearest true (merged) change point (None without annotations).

    Examples
    --------
    >>> r = evaluate_locations([49, 152], {"a": [50], "b": [48, 150]}, n=200)
    >>> round(r["f1"], 4), r["mean_abs_error"], r["errors"]
    (1.0, 1.5, [1, 2])
    """
    n = int(n)
    points = sorted({int(c) for c in located})
    det = evaluate_detector(points, annotations, n, margin=margin)
    out: dict[str, Any] = {
        "located": points,
        "n_located": len(points),
        "f1": det["f1"],
        "f1_1pct": det["f1_1pct"],
        "precision": det["precision"],
        "recall": det["recall"],
        "covering": det["covering"],
        "mean_abs_error": None,
        "errors": None,
    }
    truth = det["change_points"]
    if annotations is not None and truth:
        errors = [min(abs(p - c) for c in truth) for p in points]
        out["errors"] = errors
        out["mean_abs_error"] = sum(errors) / len(errors) if errors else None
    return out


def located_positions(outputs: list[dict], positions: list[int | None]) -> tuple[list, int]:
    """The positions of the outputs' ``change_at`` values, and how many could not be mapped."""
    det_pos = [p for p, o in zip(positions, outputs, strict=True) if "alarm" in o]
    located, unmatched = [], 0
    for o in outputs:
        j = o.get("change_at")
        if not o.get("alarm") or not isinstance(j, numbers.Integral) or isinstance(j, bool):
            continue
        p = det_pos[j] if 0 <= j < len(det_pos) else None
        if p is None:
            unmatched += 1
        else:
            located.append(p)
    return sorted(set(located)), unmatched


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def pool_detectors(reports: list[dict]) -> dict:
    annotated = [r for r in reports if r["annotated"]]
    dets = [r["detection"] for r in reports if r["detection"] is not None]
    delays = [d for s in dets for d in s["delays"] if d is not None]
    false_alarms = sum(s["n_false_alarms"] for s in dets)
    no_change = sum(s["no_change_samples"] for s in dets)
    located = [r["location"] for r in reports if r.get("location") is not None]
    location = None
    if located:
        ann_loc = [r["location"] for r in annotated if r.get("location") is not None]
        errors = [e for r in located for e in (r["errors"] or [])]
        location = {
            "n_located": sum(r["n_located"] for r in located),
            "f1": _mean([r["f1"] for r in ann_loc]),
            "f1_1pct": _mean([r["f1_1pct"] for r in ann_loc]),
            "precision": _mean([r["precision"] for r in ann_loc]),
            "recall": _mean([r["recall"] for r in ann_loc]),
            "covering": _mean([r["covering"] for r in ann_loc]),
            "mean_abs_error": sum(errors) / len(errors) if errors else None,
        }
    return {
        "location": location,
        "n_series": len(reports),
        "n_annotated": len(annotated),
        "alarms": sum(r["n_alarms"] for r in reports),
        "f1": _mean([r["f1"] for r in annotated]),
        "f1_1pct": _mean([r.get("f1_1pct") for r in annotated]),
        "precision": _mean([r["precision"] for r in annotated]),
        "recall": _mean([r["recall"] for r in annotated]),
        "covering": _mean([r["covering"] for r in annotated]),
        "detection": {
            "n_changes": sum(len(s["change_points"]) for s in dets),
            "n_detected": sum(s["n_detected"] for s in dets),
            "n_missed": sum(s["n_missed"] for s in dets),
            "n_false_alarms": false_alarms,
            "mean_delay": sum(delays) / len(delays) if delays else None,
            "delays": delays,
            "no_change_samples": no_change,
            "average_run_length": no_change / false_alarms if false_alarms else math.inf,
        },
    }
