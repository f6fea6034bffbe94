"""What several commands parse: ``--param``/``--source-opt`` pairs, operator chains, and
``--labels`` (true change points, as positions in each key's stream, from a list, a JSON
text or a JSON file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from shiftwatch.deploy.errors import UserError, user_input

__all__ = ["build_operators", "load_labels", "parse_params"]


def load_labels(spec: str, source_name: str | None = None) -> dict:
    """Read true change points from ``spec``.

    Positions are 0-based positions in each key's own stream (the ``n``-th record of that key),
    not line numbers. ``spec`` is a comma-separated list (``"120,480"``, the same for every
    key) or a JSON file holding one of:

    * ``[120, 480]``: the same change points for every key;
    * ``{"s1": [120, 480], "s2": []}``: per key (``[]`` means the key never changed, a key
      left out is not scored, ``"*"`` gives the labels of every key not named);
    * ``{"s1": {"ann1": [120], "ann2": [118]}}``: per key, several annotators
      (``{"*": {"ann1": [...], "ann2": [...]}}``: annotators for every key);
    * ``{"ann1": [...], "ann2": [...]}``: annotators, for an unkeyed stream (no ``key``);
    * a TCPD annotations file (dataset -> annotator -> positions): the dataset named like
      the source, or the only one of an unkeyed stream.

    Which names are keys is decided against the stream's keys
    (:func:`shiftwatch.sinks.labels.plan_labels`): a name that is not a key of a keyed
    stream is an error, never an annotator for every key. The every-key forms come back as
    ``{"*": ...}``.

    >>> load_labels("120, 480")
    {'*': [120, 480]}
    >>> load_labels("[]")  # the same JSON inline: no key ever changed
    {'*': []}
    """
    from shiftwatch.sinks.labels import EVERY_KEY

    path = Path(spec)
    if not path.exists() and spec.strip()[:1] in ("[", "{"):
        try:  # the JSON forms inline: '[]' says no key ever changed
            data = json.loads(spec)
        except ValueError as exc:
            raise UserError(f"--labels {spec!r}: not a file, and not JSON ({exc})") from None
    elif not path.exists():
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        try:
            return {EVERY_KEY: sorted(int(p) for p in parts)}
        except ValueError:
            raise UserError(f"--labels {spec!r}: no such file, and not a list of indices") from None
    else:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UserError(f"--labels {spec}: cannot read JSON ({exc})") from None
    try:
        if isinstance(data, list):
            return {EVERY_KEY: sorted(_position(i) for i in data)}
        if isinstance(data, dict) and data and all(isinstance(v, (dict, list))
                                                   for v in data.values()):
            if isinstance(data.get(source_name), dict) and source_name != EVERY_KEY:
                # TCPD: dataset -> annotator -> positions, the one named like the source
                return {EVERY_KEY: _annotators(data[source_name])}
            # key -> positions or annotator -> positions (or an unkeyed stream's annotators
            # or one TCPD data set: decided against the stream's keys)
            return {str(k): _annotators(v) if isinstance(v, dict) else
                    sorted(_position(i) for i in v) for k, v in data.items()}
    except (TypeError, ValueError) as exc:
        raise UserError(f"--labels {spec}: {exc}") from None
    raise UserError(f"--labels {spec}: expected a list of positions, key -> positions or "
                    "key -> annotator -> positions (see `shiftwatch replay --help`)")


def _annotators(v: dict) -> dict:
    if not all(isinstance(pts, list) for pts in v.values()):
        raise ValueError("expected annotator -> list of positions")
    return {str(a): sorted(_position(i) for i in pts) for a, pts in v.items()}


def _position(i: Any) -> int:
    if isinstance(i, bool) or not isinstance(i, (int, float)) or not float(i).is_integer() \
            or i < 0:
        raise ValueError(f"positions must be integers >= 0, got {i!r}")
    return int(i)


def parse_params(pairs: list[str] | None, what: str = "--param") -> dict[str, Any]:
    """Parse ``["k=v", ...]``; values are YAML scalars or lists (``0.01``, ``true``, ``[1, 2]``).

    >>> parse_params(["delta=0.01", "field=meta.temp", "grace=[1, 2]", "name=ADWIN"])
    {'delta': 0.01, 'field': 'meta.temp', 'grace': [1, 2], 'name': 'ADWIN'}
    """
    params: dict[str, Any] = {}
    for pair in pairs or []:
        k, sep, v = pair.partition("=")
        k = k.strip()
        if not sep or not k:
            raise UserError(f"{what} {pair!r} is not of the form key=value")
        try:
            params[k] = yaml.safe_load(v) if v.strip() else ""
        except yaml.YAMLError:
            params[k] = v
    return params


def build_operators(stages: list[dict]) -> list:
    """The operators of ``[{"name": ..., "params": ["k=v", ...]}, ...]`` (a bad name or
    parameter: one line, exit 2)."""
    from shiftwatch.operators import create

    ops = []
    for stage in stages:
        params = parse_params(stage["params"])
        with user_input():
            ops.append(create(stage["name"], **params))
    return ops
