"""Sources over the datasets that ship inside River (nothing is downloaded).

* :class:`RiverDriftSource` — the seven change-point series of ``river.drift.datasets``
  (from TCPD, van den Burg & Williams 2020) with their annotations.
* :class:`RiverDatasetSource` — any local ``river.datasets`` dataset as a labelled stream.

Both give records the key ``None`` (like the file sources; the dataset name is in
``source.name``) and ``ts`` from the dataset's date column as epoch seconds (dates read as
UTC), or the 0-based index when there is none.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import math
import numbers
import os
import warnings
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import Any

from shiftwatch.records import DeadLetter
from shiftwatch.streams.base import Source

__all__ = ["RiverDriftSource", "RiverDatasetSource", "drift_dataset_names",
           "river_dataset_names"]


def _canon(name: str) -> str:
    return name.replace("_", "").replace("-", "").replace(" ", "").lower()


def _epoch(dt: datetime) -> float:
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


# --------------------------------------------------------------------------------------
# Dataset names, read from River's source
# --------------------------------------------------------------------------------------
# Importing river.datasets or river.drift.datasets loads scikit-learn and pandas (1.5-2 s), so
# listing names (``shiftwatch sources``, error messages) reads River's package files instead;
# opening a dataset imports it as usual. Any file that does not look as expected falls back to
# the import, so a River release that moves things around stays correct, only slower.


def _river_package_file(package: str) -> str | None:
    try:
        spec = importlib.util.find_spec("river")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], *package.split("."), "__init__.py")
    return path if os.path.exists(path) else None


def _exports(init_path: str) -> tuple[list[str], dict[str, str]] | None:
    """``__all__`` of a package ``__init__.py`` and, for ``from .mod import Name`` lines,
    Name -> the module file."""
    tree = ast.parse(open(init_path, encoding="utf-8").read())
    names, where = None, {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "__all__"):
            try:
                names = list(ast.literal_eval(node.value))
            except ValueError:
                return None
        elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                where[alias.asname or alias.name] = os.path.join(
                    os.path.dirname(init_path), *node.module.split(".")) + ".py"
    return (names, where) if names is not None else None


def _base_names(path: str, cls: str) -> list[str] | None:
    """The base classes of ``cls`` in ``path``, as written (``base.FileDataset``)."""
    try:
        tree = ast.parse(open(path, encoding="utf-8").read())
    except OSError:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return [ast.unparse(b) for b in node.bases]
    return None


@functools.cache
def _drift_names_from_source() -> tuple[str, ...] | None:
    init = _river_package_file("drift.datasets")
    found = _exports(init) if init else None
    return tuple(sorted(found[0])) if found else None


@functools.cache
def _dataset_names_from_source() -> tuple[str, ...] | None:
    """The local (``FileDataset``, not ``RemoteDataset``) datasets of ``river.datasets``."""
    init = _river_package_file("datasets")
    found = _exports(init) if init else None
    if not found:
        return None
    names, where = found
    out = []
    for n in names:
        if n not in where:  # a subpackage such as base or synth
            continue
        bases = _base_names(where[n], n)
        if bases is None:
            return None
        kinds = {b.rsplit(".", 1)[-1] for b in bases}
        if not kinds <= {"FileDataset", "RemoteDataset", "SyntheticDataset", "Dataset"}:
            return None  # a base we cannot classify by name: ask the import
        if "FileDataset" in kinds:
            out.append(n)
    return tuple(sorted(out))


# --------------------------------------------------------------------------------------
# Change-point datasets
# --------------------------------------------------------------------------------------

#: The TCPD series whose River annotations index a different (subsampled) series than the
#: rows River ships, and the slice that rebuilds TCPD's series from River's rows, taken from
#: TCPD's conversion scripts (datasets/brent_spot/convert.py: every 10th row, from the first
#: row of 2000; datasets/apple/get_apple.py: drop the first row, then every 3rd).
_TCPD_ALIGN = {"BrentSpotPrice": "every 10th row from the first of 2000 (500 rows)",
               "Apple": "rows 1, 4, 7, ... (622 rows)"}


def drift_dataset_names() -> list[str]:
    """The change-point datasets in ``river.drift.datasets``.

    Examples
    --------
    >>> drift_dataset_names()[:3]
    ['AirlinePassengers', 'Apple', 'Bitcoin']
    """
    names = _drift_names_from_source()
    if names is not None:
        return list(names)
    from river.drift import datasets

    return sorted(datasets.__all__)


def _resolve(name: str, names: list[str], what: str) -> str:
    table = {_canon(n): n for n in names}
    found = table.get(_canon(name))
    if found is None:
        raise ValueError(f"unknown {what} {name!r}; allowed: {', '.join(names)}")
    return found


class RiverDriftSource(Source):
    """One of River's seven annotated change-point series (TCPD) as a stream.

    Parameters
    ----------
    name
        A dataset of ``river.drift.datasets`` (case and ``_``/``-`` ignored):
        AirlinePassengers, Apple, Bitcoin, BrentSpotPrice, Occupancy, RunLog, UKCoalEmploy.
    value
        ``None`` for all the series' columns (a scalar when there is one column, else a
        vector in the order of ``columns``), one column name (a scalar), or a list of names.
    align
        ``"river"`` yields the rows River ships. ``"tcpd"`` subsamples Apple and
        BrentSpotPrice the way TCPD did, so that their annotations line up (no effect on
        the other five, whose rows already are TCPD's series).

    Attributes
    ----------
    columns
        The value columns of the dataset: Apple has Open, High, Low, Close, Adj Close,
        Volume; Occupancy V1..V4 (temperature, humidity, light, CO2); RunLog Pace and
        Distance; the other four have one column.
    annotations
        ``{annotator_id: [0-based indices]}`` as River stores them (TCPD's five annotators;
        an annotator may have marked no change).
    annotations_reliable
        ``False`` when the annotations do not index the yielded series.

    Warnings
    --------
    River ships Apple and BrentSpotPrice unsubsampled (1867 daily rows from 1996 and 8195
    daily rows from 1987) while their annotations index TCPD's subsampled series (622 and
    500 rows). With ``align="river"`` those annotations are wrong and
    ``annotations_reliable`` is ``False``; use ``align="tcpd"`` to score against them.

    Examples
    --------
    >>> src = RiverDriftSource("RunLog")
    >>> src.length, src.columns, src.annotations["6"][:3]
    (376, ['Pace', 'Distance'], [60, 96, 114])
    >>> next(iter(src))
    {'key': None, 'ts': 1533061348.0, 'value': [30.88072, 0.0]}
    >>> brent = RiverDriftSource("BrentSpotPrice")
    >>> brent.length, brent.annotations_reliable
    (8195, False)
    >>> RiverDriftSource("BrentSpotPrice", align="tcpd").length
    500
    """

    def __init__(self, name: str, value: str | Sequence[str] | None = None,
                 align: str = "river"):
        self.name = _resolve(name, drift_dataset_names(), "river drift dataset")
        self.value = value
        self.align = align
        if align not in ("river", "tcpd"):
            raise ValueError(f"align must be 'river' or 'tcpd', got {align!r}")
        self._load()

    def _load(self) -> None:
        from river.drift import datasets

        ds = getattr(datasets, self.name)()
        rows: list[tuple[float | None, dict[str, float]]] = []
        for x, y in ds:
            dates = [v for v in x.values() if isinstance(v, datetime)]
            ts = _epoch(dates[0]) if dates else None
            ys = dict(y) if isinstance(y, dict) else {self._target(ds): y}
            rows.append((ts, {k: float(v) for k, v in ys.items()}))
        self.columns: list[str] = list(rows[0][1]) if rows else []
        self._row_dates = [ts for ts, _ in rows]
        if self.align == "tcpd":
            rows = self._tcpd_rows(rows)
        picked = self._pick(self.columns)
        self._rows = rows
        self._picked = picked
        self.length = len(rows)
        self.annotations = {str(k): sorted(int(i) for i in v)
                            for k, v in ds.annotations.items()}
        within = all(0 <= i < self.length for v in self.annotations.values() for i in v)
        self.annotations_reliable = within and not (
            self.align == "river" and self.name in _TCPD_ALIGN)
        if not self.annotations_reliable:
            warnings.warn(f"{self.name}: River's change-point annotations do not index the "
                          "rows it ships; pass align='tcpd' to score against them",
                          UserWarning, stacklevel=3)

    @staticmethod
    def _target(ds: Any) -> str:
        # Univariate River drift datasets yield y as a bare number; the CSV header names it.
        with open(ds.path) as f:
            header = f.readline().strip().split(",")
        return header[-1]

    def _tcpd_rows(self, rows: list) -> list:
        if self.name == "BrentSpotPrice":
            sampled = rows[::10]
            start = next(i for i, (ts, _) in enumerate(sampled)
                         if ts is not None and datetime.fromtimestamp(ts, timezone.utc).year
                         >= 2000)
            return sampled[start:]
        if self.name == "Apple":
            return rows[1::3]
        return rows

    def _pick(self, columns: list[str]) -> str | list[str]:
        v = self.value
        if v is None:
            return columns[0] if len(columns) == 1 else list(columns)
        wanted = [v] if isinstance(v, str) else list(v)
        bad = [c for c in wanted if c not in columns]
        if bad or not wanted:
            raise ValueError(f"{self.name} has no column {', '.join(map(repr, bad)) or '[]'}; "
                             f"columns: {', '.join(columns)}")
        return v if isinstance(v, str) else wanted

    def __iter__(self) -> Iterator[dict]:
        picked = self._picked
        for i, (ts, row) in enumerate(self._rows):
            value: Any = row[picked] if isinstance(picked, str) else [row[c] for c in picked]
            yield {"key": None, "ts": float(i) if ts is None else ts, "value": value}

    def __repr__(self) -> str:
        return f"RiverDriftSource({self.name!r}, value={self.value!r}, align={self.align!r})"


# --------------------------------------------------------------------------------------
# Any local River dataset
# --------------------------------------------------------------------------------------


def river_dataset_names() -> list[str]:
    """The ``river.datasets`` datasets stored inside the River package (no download).

    >>> "Phishing" in river_dataset_names(), "Elec2" in river_dataset_names()
    (True, False)
    """
    names = _dataset_names_from_source()
    if names is not None:
        return list(names)
    from river import datasets
    from river.datasets import base

    names = []
    for n in datasets.__all__:
        cls = getattr(datasets, n, None)
        if (isinstance(cls, type) and issubclass(cls, base.FileDataset)
                and not issubclass(cls, base.RemoteDataset)):
            names.append(n)
    return sorted(names)


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real)


class RiverDatasetSource(Source):
    """A dataset that ships with River (``river.datasets``) as a labelled stream.

    Parameters
    ----------
    name
        A local dataset (case and ``_``/``-`` ignored), see :func:`river_dataset_names`:
        Bananas, ChickWeights, ImageSegments, Phishing, Shuttle, SolarFlare, SP500Stocks,
        TrumpApproval, WaterFlow, Yeast, AirlinePassengers. Datasets River downloads
        (Elec2, CreditCard, ...) are refused.

    Notes
    -----
    ``value`` is the vector of the numeric features (booleans as 0/1) in sorted feature
    name order, listed in ``columns``; text features are dropped and a date feature gives
    ``ts``. ``y`` is River's target (a dict for multi-output datasets). A dataset without
    numeric features (AirlinePassengers, WaterFlow) is a univariate series: ``value`` is the
    target and no ``y`` is set. The columns are those of the first sample; a later sample
    that lacks one or holds a non-finite number becomes a dead letter.

    Examples
    --------
    >>> src = RiverDatasetSource("Phishing")
    >>> src.length, src.columns[:3]
    (1250, ['age_of_domain', 'anchor_from_other_domain', 'empty_server_form_handler'])
    >>> rec = next(iter(src))
    >>> len(rec["value"]), rec["y"]
    (9, True)
    """

    def __init__(self, name: str):
        self.name = _resolve(name, river_dataset_names(), "local river dataset")
        from river import datasets

        self._dataset = getattr(datasets, self.name)()
        self.length = self._dataset.n_samples
        self.annotations = None
        x0, _ = next(iter(self._dataset))
        self.columns = sorted(k for k, v in x0.items() if _is_number(v))
        self._series = not self.columns

    def __iter__(self) -> Iterator[dict | DeadLetter]:
        cols = self.columns
        for i, (x, y) in enumerate(self._dataset):
            dates = [v for v in x.values() if isinstance(v, datetime)]
            ts = _epoch(dates[0]) if dates else float(i)
            try:
                if self._series:
                    value: Any = float(y)
                    if not math.isfinite(value):
                        raise ValueError(f"target is not finite: {value}")
                else:
                    value = []
                    for c in cols:
                        v = x.get(c)
                        if not _is_number(v) or not math.isfinite(float(v)):
                            raise ValueError(f"feature {c!r} is missing or not a finite "
                                             f"number: {v!r}")
                        value.append(float(v))
            except (TypeError, ValueError) as exc:
                yield DeadLetter(raw={"x": {k: repr(v) for k, v in x.items()}, "y": repr(y)},
                                 reason=str(exc), origin={"dataset": self.name, "index": i})
                continue
            record: dict[str, Any] = {"key": None, "ts": ts, "value": value}
            if not self._series:
                record["y"] = y
            yield record

    def __repr__(self) -> str:
        return f"RiverDatasetSource({self.name!r})"

