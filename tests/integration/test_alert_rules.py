"""The Prometheus alerting rules of deploy/prometheus, checked and unit-tested by Debian's
``promtool`` (the ``prometheus`` package; .ci/run installs it), and their metric names are
the ones a stage serves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from system_binaries import need_binary

from shiftwatch.deploy.observability import METRICS

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


@pytest.fixture
def promtool() -> str:
    return need_binary("promtool", package="prometheus")


def test_the_rules_are_valid_and_fire_as_their_tests_say(promtool):
    check = subprocess.run([promtool, "check", "rules", "shiftwatch-rules.yml"], cwd=RULES,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 7 rules found" in check.stdout
    test = subprocess.run([promtool, "test", "rules", "shiftwatch-rules.test.yml"], cwd=RULES,
                          capture_output=True, text=True)
    assert test.returncode == 0, test.stdout + test.stderr


def test_promtool_would_catch_a_rule_that_does_not_fire(promtool, tmp_path):
    # the unit tests can fail: the same tests against rules whose stage-down threshold is off
    text = (RULES / "shiftwatch-rules.yml").read_text().replace(
        "max by (pipeline, stage) (shiftwatch_stage_live) == 0",
        "max by (pipeline, stage) (shiftwatch_stage_live) == 2")
    (tmp_path / "shiftwatch-rules.yml").write_text(text)
    (tmp_path / "shiftwatch-rules.test.yml").write_text(
        (RULES / "shiftwatch-rules.test.yml").read_text())
    test = subprocess.run([promtool, "test", "rules", "shiftwatch-rules.test.yml"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert test.returncode != 0 and "ShiftwatchStageDown" in test.stdout + test.stderr


def test_every_metric_the_rules_use_is_one_a_stage_serves():
    used = set(re.findall(r"\bshiftwatch_[a-z_]+\b",
                          (RULES / "shiftwatch-rules.yml").read_text()))
    assert used and used <= set(METRICS), used - set(METRICS)
