"""Scoring a run and building its report (part of
:class:`~shiftwatch.sinks.evaluation.EvaluationSink`).

At close the sink scores every labelled key against its labels
(:func:`~shiftwatch.sinks.scoring.evaluate_detector`, and the located changes with
:func:`~shiftwatch.sinks.scoring.evaluate_locations`), streams each key's detail to
``keys.jsonl``, pools the keys' scores (:class:`~shiftwatch.sinks.scoring.DetectorPool`) and
the learners' (:func:`~shiftwatch.sinks.learner_scores.learner_metrics`), and returns the
report that becomes ``report.json``. :class:`ReportBuilder` is a mixin of the sink: it works
on the sink's columns through a :class:`~shiftwatch.sinks.fleet.Fleet`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from shiftwatch.codec import encode_record, jsonable, key_text
from shiftwatch.sinks.fleet import Fleet
from shiftwatch.sinks.labels import LabelPlan, plan_labels
from shiftwatch.sinks.learner_scores import learner_metrics
from shiftwatch.sinks.scoring import (
    DetectorPool,
    evaluate_detector,
    evaluate_locations,
    scoring_rules,
)

__all__ = ["ReportBuilder", "LISTED"]

#: report.json lists this many of the alarmed keys, dead letters and labels past the end
#: (every key is in keys.jsonl).
LISTED = 100


class ReportBuilder:
    """Scores and the report of an :class:`~shiftwatch.sinks.evaluation.EvaluationSink` (a
    mixin)."""

    def _build_report(self) -> dict:
        """Score every key, write ``keys.jsonl`` and return the report (without the files
        written after it)."""
        fleet = self._fleet = Fleet(self)
        keys = self._keys
        texts = [key_text(k) for k in keys]
        plan: LabelPlan = plan_labels(self.annotations, set(texts))
        self._plan, self._mode = plan, plan.mode
        pool = DetectorPool()
        memo: dict[tuple, dict] = {}
        beyond: list[dict] = []
        n_beyond = 0
        learner_groups: list[list[dict]] = []
        entries: dict[int, dict] = {}  # the listed keys' scores, for report.html
        self._scores: dict[int, dict] = {}
        n_list = fleet.n.tolist()
        n_out = fleet.n_out.tolist()
        has_det = fleet.has_detector.tolist()
        # A run whose detector locates changes scores every labelled key's located changes,
        # a key that never alarmed as the no-alarm row (none located), like its alarms.
        run_locates = bool(fleet.locates.any())
        locates = [run_locates] * len(keys)
        unmatched = fleet.unmatched.tolist()
        unmatched_loc = fleet.unmatched_locations.tolist()
        a_start, a_count = fleet.a_start.tolist(), fleet.a_count.tolist()
        l_start, l_count = fleet.l_start.tolist(), fleet.l_count.tolist()
        alarms_all = fleet.alarms.tolist()
        located_all = fleet.located.tolist()
        has_ts = bool(len(fleet.in_ts)) and bool(np.isfinite(fleet.in_ts).any())
        alarm_ts = self._alarm_ts(fleet) if has_ts else None
        self._first_alarm_ts = alarm_ts
        total_records = int(fleet.n.sum()) if len(keys) else 0
        unlabelled = np.zeros(len(keys), dtype=bool)  # detector keys without labels
        path = self._path("keys.jsonl")

        def lines() -> Iterator[bytes]:
            nonlocal n_beyond
            for k, key in enumerate(keys):
                entry: dict[str, Any] = {"key": key, "n_records": n_list[k],
                                         "n_outputs": n_out[k]}
                if unmatched[k]:
                    entry["unmatched_outputs"] = unmatched[k]
                if has_det[k]:
                    al = alarms_all[a_start[k]:a_start[k] + a_count[k]]
                    entry["alarms"] = al
                    if alarm_ts is not None:
                        entry["alarm_ts"] = [None if math.isnan(t) else t for t in
                                             alarm_ts[a_start[k]:a_start[k] + a_count[k]]]
                    loc = located_all[l_start[k]:l_start[k] + l_count[k]] if locates[k] \
                        else None
                    if loc is not None:
                        entry["located"] = loc
                    if unmatched_loc[k]:
                        entry["unmatched_locations"] = unmatched_loc[k]
                    ann = plan.for_key(texts[k])
                    if ann is not None:
                        det = self._score(memo, pool, ann, al, loc, n_list[k],
                                          unmatched_loc[k])
                        entry["detector"] = det
                        self._scores[k] = det
                        if det["beyond_end"]:
                            n_beyond += len(det["beyond_end"])
                            if len(beyond) < LISTED:
                                beyond.append({"key": key, "labels": det["beyond_end"],
                                               "n_records": n_list[k]})
                    else:
                        unlabelled[k] = True
                outs = self._learner.get(k)
                if outs:
                    entry["learner"] = learner_metrics([outs])
                    learner_groups.append(outs)
                    entries[k] = entry["learner"]
                try:
                    yield encode_record(entry)
                except Exception:  # e.g. NaN in a learner's numbers: the jsonable form
                    yield encode_record(jsonable(entry))

        ok = self._write_file("keys.jsonl", "wb", lambda fh: _write_lines(fh, lines()))
        if not ok:  # the disk is full: score the keys all the same for report.json
            for _ in lines():
                pass
        for det, weight in memo.values():  # keys alike, pooled at once
            pool.add(det, weight)
        pool.add_unlabelled(int(unlabelled.sum()), int(fleet.a_count[unlabelled].sum()),
                            int((fleet.a_count[unlabelled] > 0).sum()),
                            int(unlabelled.sum()) if run_locates else 0,
                            int(fleet.l_count[unlabelled].sum()) if run_locates else 0)
        self._learner_scores = entries
        aggregate: dict[str, Any] = {"n_keys": len(keys), "n_records": total_records}
        if fleet.has_detector.any():
            aggregate["detector"] = pool.result()
        if learner_groups:
            aggregate["learner"] = learner_metrics(learner_groups)
        operator = self.operator
        if operator is not None and not isinstance(operator, str):
            operator = repr(operator)
        report: dict[str, Any] = {
            # a run that stopped before its source ended says so, and why (partial results)
            "complete": self._incomplete is None,
            "name": self.name,
            "operator": operator,
            "operators": self._describe_operators(),
            "margin": self.margin,
            "annotations": self._mode,
            "rules": scoring_rules(self.margin) if fleet.has_detector.any() else None,
            "summary": _headline(aggregate),
            "aggregate": aggregate,
        }
        if self._incomplete is not None:
            report["incomplete"] = dict(self._incomplete)
        if self._keys_evicted:
            # keys forgotten by the state rule (deploy/expiry.py): a key seen again restarted
            report["keys_evicted"] = self._keys_evicted
            report["summary"]["keys_evicted"] = self._keys_evicted
        if self._alarms_by_operator is not None:
            # every detector of the chain, the last one (the outputs scored here) included
            report["alarms_by_operator"] = self._alarms_by_operator
        if ok:
            report["keys_file"] = path
        order = self._key_order(fleet)
        self._order = order
        if fleet.has_detector.any():
            report["alarmed_keys"] = self._alarmed(fleet, order)
        if n_beyond:
            report["labels_beyond_end"] = {"count": n_beyond, "keys": sum(
                1 for d in self._scores.values() if d["beyond_end"]), "first": beyond}
            report["summary"]["labels_beyond_end"] = n_beyond
        short = self._short_keys(fleet)
        if short is not None:
            # keys too short for the detector to alarm at all: "no alarm" there says nothing
            report["short_keys"] = short
            report["summary"]["short_keys"] = short["count"]
        report["dead_letters"] = {"count": self._dead_count,
                                  "by_reason": dict(self._dead_reasons.most_common()),
                                  "first": list(self._dead_first)}
        self._defer_panels(fleet, order)  # built only if the plots are drawn
        return report

    def _score(self, memo: dict, pool: DetectorPool, ann: Any, alarms: list,
               located: list | None, n: int, lost: int) -> dict:
        """``evaluate_detector`` (and the located changes) of one key, pooled; keys alike
        (the same labels object, alarms, located changes and length: a fleet's quiet keys)
        are scored once and pooled at the end with their count."""
        memo_key = (id(ann), n, tuple(alarms), None if located is None else tuple(located),
                    lost)
        found = memo.get(memo_key)
        if found is not None:
            found[1] += 1
            return found[0]
        annotations = ann if isinstance(ann, Mapping) else {"labels": list(ann)}
        det = evaluate_detector(alarms, annotations, n, margin=self.margin)
        det["annotated"] = True
        if located is not None:
            det["location"] = evaluate_locations(located, annotations, n, margin=self.margin)
            if lost:
                det["location"]["unmatched_locations"] = lost
        det = jsonable(det)
        if len(memo) < 100_000:
            memo[memo_key] = [det, 1]
        else:
            pool.add(det)
        return det

    def _alarm_ts(self, fleet: Fleet) -> list[float]:
        """The input ``ts`` at every alarm (in the order of ``fleet.alarms``)."""
        k = np.repeat(np.arange(fleet.n_keys), fleet.a_count)
        pos = fleet.alarms
        out = np.full(len(pos), np.nan)
        ok = pos < fleet.n_in[k]
        if ok.any():
            out[ok] = fleet.in_ts[fleet.in_order[fleet.in_start[k[ok]] + pos[ok]]]
        return out.tolist()

    def _key_order(self, fleet: Fleet) -> np.ndarray:
        """Keys with alarms first (most alarms first, then the earliest first alarm), then
        the others in the order they were first seen."""
        first = np.zeros(fleet.n_keys, dtype=np.int64)
        has = fleet.a_count > 0
        first[has] = fleet.alarms[fleet.a_start[has]]
        return np.lexsort((np.arange(fleet.n_keys), first, -fleet.a_count))

    def _alarmed(self, fleet: Fleet, order: np.ndarray) -> list[dict]:
        out = []
        ts = self._first_alarm_ts
        for k in order[:LISTED].tolist():
            if not fleet.a_count[k]:
                break
            s = int(fleet.a_start[k])
            first_ts = ts[s] if ts is not None and not math.isnan(ts[s]) else None
            out.append({"key": self._keys[k], "alarms": int(fleet.a_count[k]),
                        "first_alarm": int(fleet.alarms[s]), "first_alarm_ts": first_ts})
        return out

    def _short_keys(self, fleet: Fleet) -> dict | None:
        """The keys with fewer records than the scoring detector's warm-up (its
        ``warm_up()``), or None when there are none."""
        warm, who = None, None
        for op in reversed(list(self.operators or ())):
            fn = getattr(op, "warm_up", None)  # Operator.warm_up (a Keyed one's included)
            if callable(fn):
                warm = fn()
                if warm is not None:
                    who = getattr(getattr(op, "operator", op), "name", None)
                    break
        if not warm or not len(self._keys):
            return None
        short = np.flatnonzero(fleet.has_detector & (fleet.n < warm))
        if not len(short):
            return None
        return {"count": int(len(short)), "operator": who, "warm_up": int(warm),
                "first": [{"key": self._keys[k], "n_records": int(fleet.n[k])}
                          for k in short[:LISTED].tolist()]}

    def _describe_operators(self) -> list[dict] | None:
        if self.operators is None:
            return None
        out = []
        for op in self.operators:
            if isinstance(op, Mapping):
                out.append({"name": op.get("name"), "params": jsonable(op.get("params"))})
                continue
            params = op.all_params() if hasattr(op, "all_params") else {}
            out.append({"name": getattr(op, "name", type(op).__name__),
                        "params": jsonable(params)})
        return out


def _write_lines(fh: Any, lines: Iterable[bytes], chunk: int = 4096) -> None:
    buf: list[bytes] = []
    for line in lines:
        buf.append(line)
        if len(buf) >= chunk:
            fh.write(b"\n".join(buf) + b"\n")
            buf = []
    if buf:
        fh.write(b"\n".join(buf) + b"\n")

def _key_scores(det: Mapping) -> dict:
    """A labelled key's scores as report.html shows them."""
    detection = det.get("detection") or {}
    out = {k: det.get(k) for k in ("f1", "f1_1pct", "precision", "recall", "covering")}
    out.update(mean_delay=detection.get("mean_delay"),
               false_alarms=detection.get("n_false_alarms"),
               missed=detection.get("n_missed"),
               average_run_length=detection.get("average_run_length"))
    loc = det.get("location")
    if loc:
        out.update(located_f1=loc.get("f1"), location_error=loc.get("mean_abs_error"))
    if det.get("beyond_end"):
        out["labels_beyond_end"] = len(det["beyond_end"])
    return out

def _headline(aggregate: dict) -> dict:
    """The flat ``summary`` block: the aggregate numbers a console line or a table needs."""
    out: dict[str, Any] = {"records": aggregate["n_records"], "keys": aggregate["n_keys"]}
    det = aggregate.get("detector")
    if det:
        out.update(alarms=det["alarms"], keys_with_alarms=det["keys_with_alarms"],
                   labelled_keys=det["n_annotated"])
        d = det.get("detection")
        if det["n_annotated"] and d is not None:
            out.update(
                f1=det["f1"],
                f1_1pct=det.get("f1_1pct"),
                precision=det["precision"],
                recall=det["recall"],
                covering=det["covering"],
                changes=d["n_changes"],
                detected=d["n_detected"],
                mean_delay=d["mean_delay"],
                false_alarms=d["n_false_alarms"],
                missed=d["n_missed"],
                average_run_length=d["average_run_length"],
            )
            loc = det.get("location")
            if loc:
                out.update(
                    located_f1=loc["f1"],
                    located_f1_1pct=loc.get("f1_1pct"),
                    located_covering=loc["covering"],
                    location_error=loc["mean_abs_error"],
                )
    learner = aggregate.get("learner")
    if learner:
        main = learner.get("y_pred") or {}
        out.update(
            accuracy=main.get("accuracy"),
            forgetting=main.get("forgetting"),
            average_accuracy=main.get("average_accuracy"),
        )
    return out
