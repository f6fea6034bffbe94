"""Opening a source from a spec string, and replaying it at a chosen speed.

Spec strings (what ``shiftwatch replay SOURCE`` takes):

* a path ending ``.csv``, ``.tsv`` (optionally ``.gz``) ->
:class:`~shiftwatch.streams.files.CsvSource`
  (``.tsv`` sets ``delimiter="\\t"``);
* a path ending ``.jsonl``, ``.ndjson`` or ``.json`` (optionally ``.gz``) ->
  :class:`~shiftwatch.streams.files.JsonlSource` (``.json`` files must be JSON Lines too);
* ``river:NAME`` -> :class:`~shiftwatch.streams.river_data.RiverDriftSource` when NAME is one of
  River's change-point datasets, else :class:`~shiftwatch.streams.river_data.RiverDatasetSource`
  (``river:datasets.NAME`` forces the latter: River has two AirlinePassengers);
* ``synth:NAME`` with NAME in gaussian, gaussian-mean, gaussian-variance, beta, wishart,
  grassmann -> the generator of :mod:`shiftwatch.streams.synthetic`;
* ``kafka:TOPIC?bootstrap=HOST:PORT&start=..&end=..&start_time=..&end_time=..`` ->
  :class:`~shiftwatch.streams.kafka.KafkaSource` (query keys are its options; no consumer group).

Options are the keyword arguments of the class the spec resolves to.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from shiftwatch.records import DeadLetter
from shiftwatch.streams.base import Source
from shiftwatch.streams.files import CsvSource, JsonlSource
from shiftwatch.streams.river_data import (
    RiverDatasetSource,
    RiverDriftSource,
    _canon,
    drift_dataset_names,
    river_dataset_names,
)
from shiftwatch.streams.synthetic import (
    BetaStream,
    GaussianShift,
    GrassmannStream,
    WishartSPDStream,
)

__all__ = ["paced", "open_source", "list_sources", "SourceInfo", "SYNTHETIC"]


# --------------------------------------------------------------------------------------
# Pacing
# --------------------------------------------------------------------------------------


#: The longest single wait of a paced replay (seconds of wall time): a gap in event time
#: longer than this (one far-future timestamp, a night without data) is shortened to it, and
#: the clock moves on from there (a single bad ts used to make a replay sleep for months).
MAX_WAIT_S = 10.0


def paced(items: Iterable[Any], speed: float | None = None, *,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep,
          max_wait_s: float = MAX_WAIT_S) -> Iterator[Any]:
    """Yield ``items`` as fast as possible, or in event time scaled by ``speed``.

    With ``speed`` ``None`` or 0 items pass through unchanged. With ``speed = f > 0`` a
    record with event time ``ts`` is yielded once the wall time since the first timed record
    is about ``(ts - ts0) / f`` (``f = 1`` real time, ``f = 60`` a minute per second).
    Dead letters, non-mapping items and records without a numeric ``ts`` pass at once;
    a ``ts`` earlier than one already replayed does not wait. One wait is at most
    ``max_wait_s`` seconds: a longer gap is shortened, and later records are paced from it.

    Examples
    --------
    >>> import time
    >>> recs = [{"ts": 0.0, "value": 1}, {"ts": 1.0, "value": 2}, {"ts": 2.0, "value": 3}]
    >>> t0 = time.monotonic()
    >>> [r["value"] for r in paced(recs, speed=40)]
    [1, 2, 3]
    >>> 0.045 < time.monotonic() - t0 < 0.5
    True
    """
    if speed is None or speed == 0:
        yield from items
        return
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or \
            not math.isfinite(speed) or speed < 0:
        raise ValueError(f"speed must be None, 0 (as fast as possible) or a finite number > 0, "
                         f"got {speed!r}")
    ts0: float | None = None
    wall0 = 0.0
    for item in items:
        if isinstance(item, Mapping) and not isinstance(item, DeadLetter):
            ts = item.get("ts")
            if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts):
                if ts0 is None:
                    ts0, wall0 = float(ts), clock()
                else:
                    delay = (ts - ts0) / speed - (clock() - wall0)
                    if delay > max_wait_s:  # the gap is shortened: pace on from here
                        wall0 -= delay - max_wait_s
                        delay = max_wait_s
                    if delay > 0:
                        sleep(delay)
        yield item


# --------------------------------------------------------------------------------------
# Spec strings
# --------------------------------------------------------------------------------------

#: ``synth:NAME`` -> (constructor, one-line summary).
SYNTHETIC: dict[str, tuple[Callable[..., Source], str]] = {
    "gaussian": (GaussianShift, "Gaussian stream with mean/variance shifts (GaussianShift)"),
    "gaussian-mean": (
        functools.partial(GaussianShift, means=(0.0, 1.0), sigmas=(1.0, 1.0)),
        "Gaussian mean shift 0 -> 1 at 500 of 1000"),
    "gaussian-variance": (
        functools.partial(GaussianShift, means=(0.0, 0.0), sigmas=(1.0, 2.0)),
        "Gaussian standard deviation 1 -> 2 at 500 of 1000"),
    "beta": (BetaStream, "Beta stream on [0, 1], mean 0.25 -> 0.35 (BetaStream)"),
    "wishart": (WishartSPDStream, "8x8 SPD Wishart matrices, scale change at 1500 of 2000"),
    "grassmann": (GrassmannStream, "Gr(20, 5) points, mean change at 1500 of 2000"),
}

_CSV_SUFFIXES = (".csv", ".tsv")
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")


@dataclass
class SourceInfo:
    """What ``shiftwatch sources`` prints for one spec."""

    spec: str
    summary: str
    params: dict = field(default_factory=dict)  # name -> default ("required" if none)

    def __str__(self) -> str:
        """One line for ``shiftwatch sources``.

        >>> print(SourceInfo("synth:beta", "Beta stream", {"n": 1000, "seed": 0}))
        synth:beta                        Beta stream; options: n=1000, seed=0
        """
        opts = ", ".join(k if v == "required" else f"{k}={v!r}" for k, v in self.params.items())
        return f"{self.spec:<33} {self.summary}" + (f"; options: {opts}" if opts else "")


def _params(ctor: Callable[..., Any], skip: tuple[str, ...] = ()) -> dict:
    sig = inspect.signature(ctor)
    return {p.name: ("required" if p.default is p.empty else p.default)
            for p in sig.parameters.values()
            if p.name not in skip and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _construct(spec: str, ctor: Callable[..., Source], positional: tuple, options: dict,
               skip: tuple[str, ...] = ()) -> Source:
    allowed = _params(ctor, skip)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"source {spec!r} has no option {', '.join(map(repr, unknown))}; "
                         f"options: {', '.join(allowed) or '(none)'}")
    try:
        return ctor(*positional, **options)
    except TypeError as exc:
        raise ValueError(f"source {spec!r}: {exc}") from None


def _strip_gz(path: str) -> str:
    return path[:-3] if path.lower().endswith(".gz") else path


def open_source(spec: str, **options: Any) -> Source:
    """Return the source a spec string names, constructed with ``options``.

    Unknown specs and unknown options raise ``ValueError`` with one line listing what is
    allowed; a missing file raises ``FileNotFoundError``.

    Examples
    --------
    >>> src = open_source("synth:gaussian-variance", n=10, change_points=(5,), seed=3)
    >>> type(src).__name__, src.sigmas, src.length, src.annotations
    ('GaussianShift', (1.0, 2.0), 10, {'truth': [5]})
    >>> open_source("synth:nope")
    Traceback (most recent call last):
    ...
    ValueError: unknown synthetic stream 'nope'; allowed: gaussian, gaussian-mean, \
gaussian-variance, beta, wishart, grassmann
    """
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"source spec must be a non-empty string, got {spec!r}")
    prefix, sep, rest = spec.partition(":")
    if sep and prefix == "synth":
        if rest not in SYNTHETIC:
            raise ValueError(f"unknown synthetic stream {rest!r}; allowed: "
                             f"{', '.join(SYNTHETIC)}")
        return _construct(spec, SYNTHETIC[rest][0], (), options)
    if sep and prefix == "river":
        if rest.startswith("datasets."):  # River has two different AirlinePassengers
            return _construct(spec, RiverDatasetSource, (rest[9:],), options, skip=("name",))
        drift = {_canon(n) for n in drift_dataset_names()}
        local = {_canon(n) for n in river_dataset_names()}
        if _canon(rest) in drift:
            return _construct(spec, RiverDriftSource, (rest,), options, skip=("name",))
        if _canon(rest) in local:
            return _construct(spec, RiverDatasetSource, (rest,), options, skip=("name",))
        # River has two AirlinePassengers: the annotated drift series, river:NAME, and the
        # regression dataset, river:datasets.NAME. List each once, as `shiftwatch sources`.
        names = drift_dataset_names() + [
            f"datasets.{n}" if _canon(n) in drift else n for n in river_dataset_names()]
        raise ValueError(f"unknown river dataset {rest!r}; allowed: {', '.join(names)}")
    if sep and prefix == "kafka":
        from urllib.parse import parse_qsl

        from shiftwatch.streams.kafka import KafkaSource

        topic, _, query = rest.partition("?")
        if not topic:
            raise ValueError(f"source {spec!r}: give a topic, kafka:TOPIC?bootstrap=HOST:PORT")
        options = {**dict(parse_qsl(query, keep_blank_values=True)), **options}
        return _construct(spec, KafkaSource, (topic,), options, skip=("topic",))
    lower = _strip_gz(spec.lower())
    if lower.endswith(_CSV_SUFFIXES):
        if lower.endswith(".tsv"):
            options = {"delimiter": "\t", **options}
        return _construct(spec, CsvSource, (spec,), options, skip=("path",))
    if lower.endswith(_JSONL_SUFFIXES):
        return _construct(spec, JsonlSource, (spec,), options, skip=("path",))
    raise ValueError(f"cannot open source {spec!r}: give a .csv/.tsv/.jsonl/.ndjson/.json "
                     "file (optionally .gz), river:NAME, kafka:TOPIC or synth:NAME "
                     f"(NAME in {', '.join(SYNTHETIC)})")


def list_sources() -> list[SourceInfo]:
    """Every spec :func:`open_source` accepts, with a summary and the options.

    Examples
    --------
    >>> [s.spec for s in list_sources()][:3]
    ['FILE.csv', 'FILE.jsonl', 'river:AirlinePassengers']
    """
    out = [SourceInfo("FILE.csv", "CSV with a header row (.tsv, .gz too)",
                      _params(CsvSource, ("path",))),
           SourceInfo("FILE.jsonl", "JSON Lines (.ndjson, .json, .gz too)",
                      _params(JsonlSource, ("path",)))]
    drift_params = _params(RiverDriftSource, ("name",))
    for n in drift_dataset_names():
        out.append(SourceInfo(f"river:{n}", "River/TCPD change-point series, annotated",
                              drift_params))
    drift = set(drift_dataset_names())
    for n in river_dataset_names():
        if n in drift:  # the same name as an annotated series above: say which is which
            out.append(SourceInfo(f"river:datasets.{n}", "River dataset: numeric features "
                                  f"and label (river:{n} is the annotated series)", {}))
        else:
            out.append(SourceInfo(f"river:{n}", "River dataset: numeric features and label",
                                  {}))
    for n, (ctor, summary) in SYNTHETIC.items():
        out.append(SourceInfo(f"synth:{n}", summary, _params(ctor)))
    from shiftwatch.streams.kafka import KafkaSource

    out.append(SourceInfo("kafka:TOPIC?bootstrap=H:P", "Kafka topic history between offsets or "
                          "times (no consumer group)", _params(KafkaSource, ("topic", "client"))))
    return out
