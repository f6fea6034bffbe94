"""A missing system program skips a test outside CI (with the package to install) and fails
it under CI, where .ci/run installs it."""

from __future__ import annotations

import shutil

import pytest
from system_binaries import need_binary


def test_a_missing_program_skips_outside_ci_and_fails_in_ci(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install -y chromium"):
        need_binary("chromium", package="chromium")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        need_binary("chromium", package="chromium")
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    assert need_binary("chromium", package="chromium") == "/usr/bin/chromium"
