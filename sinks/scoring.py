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
           "pool_detectors", "DetectorPool", "scoring_rules"]


def scoring_rules(margin: int = 5) -> dict[str, str]:
    """The matching rule behind each score, in words (``report.json``'s ``rules``; the console
    and ``report.html`` print them beside the scores).

    Two rules score alarms, and both are reported so that neither hides the other: the TCPD
    margin rule (F1, precision, recall: an alarm more than ``margin`` records after a change
    is a false positive and the change a miss) and the delay rule (detections, delays, false
    alarms, missed changes: the first alarm after a change detects it, however late).
    """
    return {
        "f1": f"TCPD F1 at margin {margin} (van den Burg & Williams 2020): an alarm within "
              f"{margin} records of a labelled change matches it (each change at most once, "
              "by the closest alarm); position 0 counts as a change point of both sets, so a "
              "key labelled [] with no alarm scores precision = recall = F1 = 1; recall is "
              "the mean over annotators. precision and recall follow the same rule",
        "f1_1pct": "the same F1 at a margin of int(0.01 * n) records (TSSB / ClaSS)",
        "covering": "segment covering (TCPD): the labelled segments' best Jaccard overlap "
                    "with the segments the alarms cut, weighted by length",
        "detection": "the delay rule: the first alarm at or after a labelled change and "
                     "before the next one detects it, at any delay (mean_delay); every other "
                     "alarm is a false alarm; a change without one is missed; "
                     "average_run_length = no-change records / false alarms",
        "location": "the same F1, covering and rules, of the located changes (change_at) "
                    "instead of the alarms; location_error: mean distance of a located change "
                    "to the nearest labelled one; a labelled key with no alarm has none located",
        "over_keys": "f1, f1_1pct, precision, recall and covering are means over the "
                     "labelled keys, each key weighing the same (TCPDBench averages over "
                     "series); detections, delays, false alarms and missed changes are pooled "
                     "over the labelled keys; alarms are counted over every key",
    }


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
        ``{annotator: [change points]}``, one list of change points (``[]``: the series never
        changed), or None (unknown: nothing is scored, as ``{}``). Change points at or
        beyond ``n`` lie past the end of the series: they are listed in ``beyond_end`` and
        count as missed (in the recall, the F1 and ``n_missed``), never as detected.
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
        (the merged truth, inside the series), ``beyond_end`` (the merged truth at or past
        ``n``) and ``detection``: :func:`~shiftwatch.sinks.metrics.detection_summary` against
        those change points (its ``average_run_length`` is ``inf`` when there is no false
        alarm; ``n_missed`` counts the points beyond the end too), or None without
        annotations: with no truth an alarm is neither false nor true.

    Examples
    --------
    >>> r = evaluate_detector([52, 130], {"a": [50], "b": [48, 150]}, n=200)
    >>> r["precision"], r["recall"]  # P = 2/3 (0 and 52), R = (2/2 + 2/3) / 2
    (0.6666666666666666, 0.8333333333333333)
    >>> round(r["f1"], 4), r["change_points"], r["detection"]["delays"]
    (0.7407, [48, 150], [4, None])
    >>> r["margin_1pct"], round(r["f1_1pct"], 4)  # margin 2: 52 still meets a's 50, not b's 48
    (2, 0.6667)
    >>> evaluate_detector([], [], n=10)["detection"]["average_run_length"]  # never changed
    inf
    >>> evaluate_detector([3], None, n=10)["detection"] is None  # unknown: nothing scored
    True
    >>> past = evaluate_detector([], [500, 1200], n=400)  # labels past the end: missed
    >>> past["beyond_end"], past["recall"], past["detection"]["n_missed"]
    ([500, 1200], 0.3333333333333333, 2)
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
    if annotations is None:
        out.update(change_points=[], beyond_end=[], detection=None)
        return out
    if n > 0:
        # Change points past the end were not reached: they count as missed in the F1 and
        # the recall (f_measure matches nothing to them), and covering ignores them.
        ann = {k: [int(c) for c in v] for k, v in annotations.items()}
        f, p, r = f_measure(ann, alarm_list, margin=margin, return_PR=True)
        out.update(f1=f, precision=p, recall=r, covering=covering(ann, alarm_list, n),
                   f1_1pct=f_measure(ann, alarm_list, margin=out["margin_1pct"]))
    merged = merge_change_points(annotations, margin)
    truth = [c for c in merged if c < n]
    out["change_points"] = truth
    out["beyond_end"] = [c for c in merged if c >= n]
    detection = detection_summary(alarm_list, truth, n) if n > 0 else None
    if detection is not None and out["beyond_end"]:
        detection["n_missed"] += len(out["beyond_end"])
        detection["beyond_end"] = list(out["beyond_end"])
    out["detection"] = detection
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


class DetectorPool:
    """The run's detector scores, pooled key by key (:meth:`add` each key's
    :func:`evaluate_detector` report with ``annotated`` set, then :meth:`result`).

    Alarms are counted over every key; F1, precision, recall and covering are the unweighted
    mean over the annotated keys (as TCPDBench averages over series); delays, false alarms
    and missed changes are pooled over the annotated keys only (a key without labels has no
    false alarms, only alarms), and the average run length is their pooled no-change samples
    over their pooled false alarms. At most ``max_delays`` delays are kept in the list
    (``n_delays`` counts them all).
    """

    _MEANS = ("f1", "f1_1pct", "precision", "recall", "covering")

    def __init__(self, max_delays: int = 1000) -> None:
        self.max_delays = max_delays
        self.n_series = 0
        self.alarms = 0
        self.keys_with_alarms = 0
        self.n_annotated = 0
        self._sums = dict.fromkeys(self._MEANS, 0.0)
        self._counts = dict.fromkeys(self._MEANS, 0)
        self._loc_sums = dict.fromkeys(self._MEANS, 0.0)
        self._loc_counts = dict.fromkeys(self._MEANS, 0)
        self.n_changes = self.n_detected = self.n_missed = self.n_false_alarms = 0
        self.no_change = 0
        self.delays: list[int] = []
        self.n_delays = 0
        self.delay_sum = 0
        self.n_located = 0
        self.n_locating = 0
        self.error_sum = 0.0
        self.n_errors = 0
        self.beyond_end = 0

    def add(self, report: Mapping, weight: int = 1) -> None:
        """Pool one key's report (``weight`` keys with this very report)."""
        w = weight
        self.n_series += w
        k = report["n_alarms"]
        self.alarms += w * k
        self.keys_with_alarms += w * (k > 0)
        loc = report.get("location")
        if loc is not None:
            self.n_locating += w
            self.n_located += w * loc["n_located"]
            errors = loc.get("errors") or []
            self.error_sum += w * sum(errors)
            self.n_errors += w * len(errors)
        if not report.get("annotated"):
            return
        self.n_annotated += w
        for m in self._MEANS:
            v = report.get(m)
            if v is not None:
                self._sums[m] += w * v
                self._counts[m] += w
            if loc is not None and loc.get(m) is not None:
                self._loc_sums[m] += w * loc[m]
                self._loc_counts[m] += w
        det = report.get("detection")
        if det is None:
            return
        beyond = len(det.get("beyond_end") or ())
        self.n_changes += w * (len(det["change_points"]) + beyond)
        self.n_detected += w * det["n_detected"]
        self.n_missed += w * det["n_missed"]
        self.n_false_alarms += w * det["n_false_alarms"]
        self.no_change += w * det["no_change_samples"]
        self.beyond_end += w * beyond
        found = [d for d in det["delays"] if d is not None]
        self.n_delays += w * len(found)
        self.delay_sum += w * sum(found)
        for _ in range(w if found else 0):
            if len(self.delays) >= self.max_delays:
                break
            self.delays.extend(found[:self.max_delays - len(self.delays)])

    def add_unlabelled(self, n_series: int, alarms: int, keys_with_alarms: int,
                       n_locating: int = 0, n_located: int = 0) -> None:
        """Pool ``n_series`` keys without labels at once: they count their alarms only."""
        self.n_series += n_series
        self.alarms += alarms
        self.keys_with_alarms += keys_with_alarms
        self.n_locating += n_locating
        self.n_located += n_located

    def _mean(self, m: str, located: bool = False) -> float | None:
        sums, counts = (self._loc_sums, self._loc_counts) if located else (self._sums,
                                                                           self._counts)
        return sums[m] / counts[m] if counts[m] else None

    def result(self) -> dict:
        location = None
        if self.n_locating:
            location = {
                "n_located": self.n_located,
                **{m: self._mean(m, located=True) for m in self._MEANS},
                "mean_abs_error": self.error_sum / self.n_errors if self.n_errors else None,
            }
        fa = self.n_false_alarms
        taken_over = {
            "alarms": f"every key with detector outputs ({self.n_series})",
            "scores": f"mean over the {self.n_annotated} labelled keys",
            "detection": f"pooled over the {self.n_annotated} labelled keys",
        }
        if location is not None:
            location["n_keys"] = self._loc_counts["f1"]
            taken_over["location"] = (f"mean over the {self._loc_counts['f1']} labelled keys "
                                      "(a key without alarms: no located change)")
        return {
            "taken_over": taken_over,
            "location": location,
            "n_series": self.n_series,
            "n_annotated": self.n_annotated,
            "alarms": self.alarms,
            "keys_with_alarms": self.keys_with_alarms,
            **{m: self._mean(m) for m in self._MEANS},
            "detection": None if not self.n_annotated else {
                "n_changes": self.n_changes,
                "n_detected": self.n_detected,
                "n_missed": self.n_missed,
                "n_beyond_end": self.beyond_end,
                "n_false_alarms": fa,
                "mean_delay": self.delay_sum / self.n_delays if self.n_delays else None,
                "delays": list(self.delays),
                "n_delays": self.n_delays,
                "no_change_samples": self.no_change,
                "average_run_length": self.no_change / fa if fa else math.inf,
            },
        }


def pool_detectors(reports: Iterable[Mapping]) -> dict:
    """The pooled scores of several keys' reports (see :class:`DetectorPool`)."""
    pool = DetectorPool()
    for r in reports:
        pool.add(r)
    return pool.result()
