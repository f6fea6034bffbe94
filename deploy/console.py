"""What ``shiftwatch replay`` prints after a run: the scores, each group with the rule that
matched it and the keys it is taken over, and the files that could not be written."""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["print_scores", "score_lines", "print_failed"]


def print_failed(failed: dict[str, str], stopped: Exception | None = None) -> bool:
    """One line on stderr per file that could not be written; whether there was any."""
    first = next(iter(getattr(stopped, "failed", {})), None)
    for path, reason in failed.items():
        notes = [*(["the run stopped there"] if path == first else []),
                 *(["the file there is from before"] if os.path.exists(path) else [])]
        print(f"shiftwatch: error: cannot write {path}: {reason}"
              + (f" ({'; '.join(notes)})" if notes else ""), file=sys.stderr)
    return bool(failed)

def print_scores(report: dict) -> None:
    from shiftwatch.sinks.key_names import key_label

    agg = report.get("summary") or {}
    beyond = report.get("labels_beyond_end")
    if beyond:  # most likely labels counted in file lines, not in each key's positions
        first = beyond["first"][0]
        more = beyond["count"] - len(first["labels"][:3])
        print(f"shiftwatch: warning: {beyond['count']} label{'' if beyond['count'] == 1 else 's'}"
              f" past the end of {'its' if beyond['count'] == 1 else 'their'} key's stream "
              f"count as missed: key {key_label(first['key'])} label "
              f"{', '.join(map(str, first['labels'][:3]))} ({first['n_records']} record"
              f"{'' if first['n_records'] == 1 else 's'})"
              f"{f' and {more} more' if more > 0 else ''}; labels are positions in each key's "
              "own stream (report.json: labels_beyond_end)", file=sys.stderr)
    short = report.get("short_keys")
    if short:
        n = short["count"]
        print(f"shiftwatch: note: {n} key{'' if n == 1 else 's'} had fewer records than "
              f"{short['operator']}'s warm-up of {short['warm_up']}: it could not alarm on "
              f"{'it' if n == 1 else 'them'} (report.json: short_keys)", file=sys.stderr)
    if "alarms" in agg and not agg.get("labelled_keys"):
        print(f"scores: none (no labels): {agg['alarms']} alarms on {agg['keys_with_alarms']} "
              f"of {agg['keys']} keys, not scored as true or false (give --labels to count "
              "detections, false alarms and missed changes)")
    if report.get("annotations") is None and "accuracy" not in agg:
        return  # no truth to score against
    for line in score_lines(agg, report.get("margin", 5)):
        print(line)

def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)

def score_lines(agg: dict, margin: int = 5) -> list[str]:
    """The console's score lines: each group of figures with the rule that matched it
    (``sinks.scoring.scoring_rules`` in words) and the keys it is taken over."""

    def some(*names: str) -> list[tuple[str, Any]]:
        return [(n, agg[n]) for n in names if agg.get(n) is not None]

    lines = []
    if agg.get("f1") is not None:
        over = agg.get("labelled_keys")
        lines.append(f"scores over the {over} labelled of {agg['keys']} keys (means over keys; "
                     "a key labelled [] without alarms scores 1.0, TCPD's convention):")
        margin_part = ", ".join(f"{n} {_fmt(v)}" for n, v in some("f1", "precision", "recall"))
        extra = ", ".join(f"{label} {_fmt(agg[n])}" for n, label in
                          (("f1_1pct", "f1 at margin 1% of n"), ("covering", "covering"))
                          if agg.get(n) is not None)
        lines.append(f"  margin rule (an alarm within {margin} records of a change matches "
                     f"it): {margin_part}" + (f"; {extra}" if extra else ""))
        if agg.get("changes") is not None:
            delay = (f"{agg['detected']} of {agg['changes']} changes detected, "
                     f"{agg['missed']} missed, {agg['false_alarms']} false alarms")
            if agg.get("mean_delay") is not None:
                delay += f", mean delay {_fmt(agg['mean_delay'])}"
            if agg.get("average_run_length") is not None:
                delay += f", average run length {_fmt(agg['average_run_length'])}"
            lines.append("  delay rule (the first alarm after a change detects it, at any "
                         f"delay; every other alarm is false): {delay}")
        located = [(label, agg[n]) for n, label in (
            ("located_f1", "f1"), ("located_f1_1pct", "f1 at margin 1% of n"),
            ("located_covering", "covering"), ("location_error", "mean error"))
            if agg.get(n) is not None]
        if located:
            lines.append("  located changes (change_at), margin rule: "
                         + ", ".join(f"{label} {_fmt(v)}" for label, v in located))
    if agg.get("accuracy") is not None:
        lines.append("scores: " + ", ".join(f"{n} {_fmt(v)}" for n, v in
                                            some("accuracy", "forgetting", "average_accuracy")))
    return lines
