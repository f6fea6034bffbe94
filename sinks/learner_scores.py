"""Learner scores of one run: prequential accuracy per prediction field, and per task
the accuracy matrix, forgetting and average accuracy.
"""

from __future__ import annotations

from typing import Any

from shiftwatch.codec import key_text
from shiftwatch.sinks.metrics import (
    accuracy_matrix,
    average_accuracy,
    evaluation_triples,
    forgetting,
    prequential_accuracy,
)

__all__ = ["learner_metrics"]


def learner_metrics(groups: list[list[dict]]) -> dict:
    """Learner scores over groups of outputs (one group per key, each in arrival order)."""
    outputs = [o for g in groups for o in g]
    fields = sorted(
        {f for o in outputs for f in o if f.startswith("y_pred")}, key=lambda f: (f != "y_pred", f)
    )
    labelled = [o for o in outputs if o.get("y") is not None]
    result: dict[str, Any] = {"n_predictions": len(outputs), "n_labelled": len(labelled)}
    has_tasks = any(o.get("task") is not None for o in outputs)
    for field in fields:
        pairs = [o for o in labelled if o.get(field) is not None]
        metrics: dict[str, Any] = {"n": len(pairs), "accuracy": None}
        if pairs:
            curve = prequential_accuracy([o["y"] for o in pairs], [o[field] for o in pairs])
            metrics["accuracy"] = float(curve[-1])
        if has_tasks:
            renamed = [[{**o, "y_pred": o.get(field)} for o in g] for g in groups]
            triples = [t for g in renamed for t in evaluation_triples(g)]
            by_task: dict[str, list[int]] = {}
            for _, task, correct in triples:
                hits = by_task.setdefault(key_text(task), [0, 0])
                hits[0] += correct
                hits[1] += 1
            metrics["accuracy_by_task"] = {t: h / c for t, (h, c) in by_task.items()}
            m = accuracy_matrix(triples)
            metrics["accuracy_matrix"] = {
                "tasks": [key_text(t) for t in m.tasks],
                "R": m.R,
                "counts": m.counts,
            }
            metrics["forgetting"] = forgetting(m.R)
            metrics["average_accuracy"] = average_accuracy(m.R)
        result[field] = metrics
    return result
