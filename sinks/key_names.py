"""How a record key is shown to people: in the plots, ``report.html`` and the console table.

Keys are data: ``outputs.jsonl``, the dead letters and ``report.json`` keep them whole. A
label cuts a long key to :data:`MAX_LABEL` characters, ending in an ellipsis and a short hash
of the whole key, so that two long keys with the same beginning stay apart and a 1 MB key
costs no more to draw or print than a short one (matplotlib lays a title out glyph by glyph).
"""

from __future__ import annotations

import hashlib
from typing import Any

from shiftwatch.codec import key_text

__all__ = ["MAX_LABEL", "key_label"]

#: The longest label, in characters.
MAX_LABEL = 60


def key_label(key: Any, width: int = MAX_LABEL) -> str:
    """``key`` as text of at most ``width`` characters.

    >>> key_label("sensor-17"), key_label(7), key_label(["a", 1])
    ('sensor-17', '7', '["a", 1]')
    >>> label = key_label("x" * 1_000_000)
    >>> len(label), label[45:]
    (60, 'xxxxx\u2026#9febe89d')
    >>> key_label("x" * 99 + "y") != key_label("x" * 99 + "z")
    True
    """
    text = key if isinstance(key, str) else key_text(key)
    if len(text) <= width:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()
    tail = f"\u2026#{digest}"
    return text[: width - len(tail)] + tail
