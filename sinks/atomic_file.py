"""Files written whole or not at all: under a temporary name beside them, renamed when complete.

Every file a replay writes goes through :class:`AtomicFile`: a reader (or the next run) sees the
file as it was before, or the complete new one; never a truncated ``outputs.jsonl`` after the
disk filled up, a ``*.tmp`` file left behind, or a 0-byte PNG. When a write fails the temporary
is removed and :class:`WriteFailed` names the file and the reason, so that a run can say what it
wrote and what it did not.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import shutil
from collections.abc import Mapping
from typing import IO, Any

__all__ = ["AtomicFile", "WriteFailed", "reason_of"]


def reason_of(exc: BaseException) -> str:
    """The reason of an ``OSError`` in a few words (``No space left on device``).

    >>> reason_of(OSError(28, "No space left on device")), reason_of(OSError("odd"))
    ('No space left on device', 'odd')
    """
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class WriteFailed(OSError):
    """Files that could not be written; none of them is left behind, not even in part.

    ``failed`` maps each such path to its reason, ``written`` lists what was written (by the
    same call). ``errno`` is the first failure's.

    >>> str(WriteFailed({"out/a.json": "No space left on device"}))
    'cannot write out/a.json: No space left on device'
    """

    def __init__(self, failed: Mapping[str, str], written: tuple | list = (),
                 errno: int | None = None):
        self.failed = {os.fspath(p): r for p, r in failed.items()}
        self.written = [os.fspath(p) for p in written]
        lines = [f"cannot write {p}: {r}" for p, r in self.failed.items()]
        super().__init__("\n".join(lines) or "nothing failed")
        self.errno = errno


def _disk_file(fd: int) -> io.RawIOBase:
    """The raw file under the buffers (tests replace it to fill up a disk)."""
    return io.FileIO(fd, "w")


class AtomicFile:
    """Write ``path`` through a temporary file in its directory, renamed to ``path`` at the end.

    Parameters
    ----------
    path
        The file to write (its directory must exist).
    mode
        ``"w"`` (text) or ``"wb"``; ``"a"`` appends: the temporary starts as a copy of the
        file, so that an append too is whole or not at all.
    encoding, newline
        As for :func:`open` in text mode.

    Notes
    -----
    :meth:`open` creates ``NAME.<random>.tmp`` beside ``path`` (with the permissions
    :func:`open` would give) and returns it open; :meth:`commit` flushes it to the disk
    (``fsync``) and renames it over ``path``; :meth:`discard` closes and removes it. Neither
    leaves a temporary, even when it fails. As a context manager it commits on
    success and discards when the block raises; an ``OSError`` either way is a
    :class:`WriteFailed` naming ``path``.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "report.json"
    >>> with AtomicFile(path) as f:
    ...     _ = f.write("{}")
    >>> path.read_text(), [p.name for p in path.parent.iterdir()]
    ('{}', ['report.json'])
    """

    def __init__(self, path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8",
                 newline: str | None = None):
        if mode not in ("w", "wb", "a"):
            raise ValueError(f"mode must be 'w', 'wb' or 'a', got {mode!r}")
        self.path = os.fspath(path)
        self.mode = mode
        self.encoding = encoding
        self.newline = newline
        self._tmp: str | None = None
        self._file: IO[Any] | None = None

    def open(self) -> IO[Any]:
        """Create the temporary and return it open for writing. May raise ``OSError``."""
        if self._file is not None:
            return self._file
        folder, name = os.path.split(self.path)
        tmp = os.path.join(folder, f"{name}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
        self._tmp = tmp
        raw = None
        try:
            raw = _disk_file(fd)
            if self.mode == "a" and os.path.exists(self.path):
                with open(self.path, "rb") as old:
                    shutil.copyfileobj(old, raw)
            buffered = io.BufferedWriter(raw)
            self._file = buffered if self.mode == "wb" else io.TextIOWrapper(
                buffered, encoding=self.encoding, newline=self.newline)
        except BaseException:
            with contextlib.suppress(OSError):
                raw.close() if raw is not None else os.close(fd)
            self.discard()
            raise
        return self._file

    def commit(self) -> None:
        """Flush the temporary to the disk and rename it to ``path``; on an ``OSError`` it is
        removed and the error raised."""
        file, self._file = self._file, None
        if file is None:
            return
        try:
            file.flush()
            os.fsync(file.fileno())
            file.close()
            os.replace(self._tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError, ValueError):
                file.close()
            self.discard()
            raise
        self._tmp = None

    def discard(self) -> None:
        """Close and remove the temporary (never raises)."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError, ValueError):
                file.close()
        tmp, self._tmp = self._tmp, None
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def __enter__(self) -> IO[Any]:
        try:
            return self.open()
        except OSError as exc:
            raise WriteFailed({self.path: reason_of(exc)}, errno=exc.errno) from exc

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()
            if isinstance(exc, OSError) and not isinstance(exc, WriteFailed):
                raise WriteFailed({self.path: reason_of(exc)}, errno=exc.errno) from exc
            return
        try:
            self.commit()
        except OSError as err:
            raise WriteFailed({self.path: reason_of(err)}, errno=err.errno) from err
