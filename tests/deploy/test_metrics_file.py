"""The stage's JSON metrics file keeps the fields users tail (issue 15: keep it as it is)."""

from __future__ import annotations

import json

from shiftwatch.deploy.executor import RunSummary
from shiftwatch.deploy.kafka.stage import _metrics_file_fields

#: The fields of the metrics file before the runners shared one summary type.
FIELDS_BEFORE = {"stage", "records_in", "records_out", "dead_letters", "duplicates_dropped",
                 "checkpoints", "last_checkpoint_unix", "last_checkpoint_offsets", "lag",
                 "rate", "partitions", "started_unix"}


def test_metrics_file_keeps_every_earlier_field_with_its_meaning():
    s = RunSummary(stage="detect", records_in=120, outputs=118, dead_letters=2, seconds=4.0,
                   recent_rate=55.0, lag=3, partitions=[0, 2])
    d = json.loads(json.dumps(_metrics_file_fields(s), default=str))
    assert FIELDS_BEFORE <= set(d)
    assert d["records_out"] == d["outputs"] == 118
    assert d["rate"] == 55.0  # the recent rate, as before (not records_in / seconds)
    assert d["partitions"] == [0, 2] and d["lag"] == 3 and d["stage"] == "detect"
