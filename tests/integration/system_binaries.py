"""System programs some tests need (Debian's chromium, prometheus), found or reported.

Outside CI a missing program skips the test with one line naming the package to install (the
README's two commands are all the set-up a user needs); under ``CI`` (set by ``.ci/run``,
which installs them) it fails, so CI never passes a test it did not run.
"""

from __future__ import annotations

import os
import shutil

import pytest


def need_binary(*names: str, package: str) -> str:
    """The path of the first of ``names`` on PATH; else skip (outside CI) or fail (CI)."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    msg = (f"needs the {names[0]} program: apt-get install -y {package} "
           "(.ci/run installs it)")
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)
