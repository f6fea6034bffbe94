"""mkdocs hook: let mkdocstrings find ``shiftwatch.operators`` and the other folders.

The four folders at the top of the repository install as ``shiftwatch.streams``,
``shiftwatch.operators``, ``shiftwatch.sinks`` and ``shiftwatch.deploy`` (the ``package-dir``
mapping of ``setup.py``), which griffe's static finder does not follow. Before the build this
hook lays out, in a temporary directory, a ``shiftwatch/`` package of symbolic links (the
ground floor's files and the four folders under their import names) and points the Python
handler there, so the API pages are read from this checkout's source, whatever is installed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from mkdocs.plugins import event_priority

ROOT = Path(__file__).resolve().parents[1]
#: folder -> the name it installs as under shiftwatch (setup.py's FOLDERS)
FOLDERS = ("streams", "operators", "sinks", "deploy")
#: the temporary directory of the current build (removed when mkdocs shuts down)
_TREES: list[Path] = []


@event_priority(100)  # before mkdocstrings reads its handlers' settings
def on_config(config, **kwargs):
    on_shutdown()  # `mkdocs serve` reads the config again on each rebuild
    _TREES.append(Path(tempfile.mkdtemp(prefix="shiftwatch-api-")))
    tree = _TREES[-1] / "shiftwatch"
    tree.mkdir()
    for entry in (ROOT / "shiftwatch").iterdir():
        if entry.name != "__pycache__":
            (tree / entry.name).symlink_to(entry)
    for folder in FOLDERS:
        (tree / folder).symlink_to(ROOT / folder, target_is_directory=True)
    handlers = config.plugins["mkdocstrings"].config["handlers"]
    handlers.setdefault("python", {})["paths"] = [str(tree.parent)]
    return config


def on_shutdown(**kwargs):
    while _TREES:
        shutil.rmtree(_TREES.pop(), ignore_errors=True)
