"""``auto``: one detector for a user who does not know what will change.

Each key is routed once, by a rule stated in words and decided on the key's own first
records (the same progressive burn-in as ``shape``). The defaults, chosen on the development
data by rules declared before their scores (``benchmarks/results/auto.md``):

* **From the first record** the level detector runs (``standardize`` (30 records) then
  River's ADWIN, one per channel, an alarm when any channel alarms, located by the mean-shift
  split), so a short series can alarm (ADWIN checks every 32 records: its warm-up).
* **A univariate key** goes to ``class`` (ClaSS) once it has ``class``'s warm-up (500
  records), whatever its period. ``class`` replays the buffered first records, so none is
  lost; alarms of that replay come on the record that handed over (``change_at`` the latest,
  ``changes_at`` all). Before that, a key with a clear period by ``shape``'s time-scale rule
  (at a checkpoint of 64, 128, 256 or 384 records) is ``shape``'s (``period="shape+class"``),
  so a short periodic series can alarm on a change of shape; one without stays with the
  level detector (``aperiodic="class"``).
* **The level detector stays beside it** (``level_gate=3``): on a univariate key, a level
  alarm is kept only when the level moved by at least 3 pooled standard deviations across
  its located change (:class:`~shiftwatch.operators.locate.LevelGate`), and a change
  the other detector located within 32 records is not reported twice. ``class``'s
  z-normalised subsequences cannot see a change of level; ADWIN's false alarms on changes of
  shape move the mean by much less than the noise.
* **A multichannel key** stays with the level detector, ungated (``multichannel="level"``),
  each channel's ADWIN with ``delta=0.2`` (``multichannel_delta``), which covers the short
  segments of the multichannel development series better than River's 0.002.

The default before the gate, ``period="shape", aperiodic="level", level_gate=None``, sends
a key with a clear period to ``shape`` (at a checkpoint of 64, 128, 256 or 384 records, rule
``"fft"`` or ``"acf"``) and leaves the others with ADWIN alone.

The inner operators are built through the registry by name (``shape``, ``class``,
``standardize``, ``river:ADWIN``), so this module imports no operator family.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from shiftwatch.operators.contract import Operator
from shiftwatch.operators.locate import GATE_STATS, LevelGate
from shiftwatch.operators.period import checkpoints, time_scale_rule
from shiftwatch.operators.registry import create, register
from shiftwatch.operators.sensitivity import Sensitivity
from shiftwatch.records import BadInput, as_array, get_field, numeric_ts

__all__ = ["AutoDetect", "CLEAR_RULES"]

#: The time-scale rules that find a clear period (``shape``'s own, at a checkpoint).
CLEAR_RULES = ("fft", "acf")

#: The fields an inner detector's output hands on.
_CARRY = ("alarm", "statistic", "threshold", "change_at", "change_ts", "changes_at",
          "coordinates")
#: "shape": the period route (``period=``); "class": an aperiodic key handed to ``class``
_ROUTES = ("deciding", "shape", "level", "class")
#: The period route's detectors (``period=``).
_PERIODS = ("shape", "class", "shape+class")
_MULTI = ("period", "level")
#: What a key without a clear period goes to (``aperiodic=``).
_APERIODIC = ("level", "class")
#: The routes' own defaults that ``strictness`` scales, read once from the operators.
_DEFAULTS: dict[tuple[str, str], Any] = {}
#: The least p-value ``strictness`` gives ``class``'s test (a positive float; the test's own
#: p-value, ``erfc``, underflows near 1e-308)
_P_FLOOR = 1e-300
#: The level route's detectors (``level=``; see the class docstring).
LEVELS = ("adwin", "handover", "relay")


def _bounded(out: Mapping) -> bool:
    """``cs`` can judge after this output: its interval is bounded on every channel."""
    lo = out.get("lower")
    if isinstance(lo, list):
        return all(v is not None for v in lo)
    return lo is not None


@register("auto")
class AutoDetect(Operator):
    """One default for any change: per key, ``class`` with a gated ADWIN beside it.

    The level detector is ``standardize`` -> River's ADWIN per channel; a univariate key goes
    to ``class`` at its warm-up, and the level detector's alarms are then kept only when the
    level moved (see the module docstring for the rule).

    Outputs carry what the detector that made them writes (``alarm``, ``statistic``,
    ``change_at``, ...) and ``route``: ``"level"``, ``"class"`` or ``"shape"``: which one
    made it (``"level"`` for a kept level alarm after the hand-over too).

    Parameters
    ----------
    field
        Dotted path of the value (a number or a vector of channels).
    multichannel
        ``"level"`` (default): multichannel keys always go to the level detector;
        ``"period"``: a multichannel key is routed by its period like a scalar one. Chosen
        on the development data by a principle declared before the scores (mean covering
        over tssb-dev, mocap6 and River's TCPD series: 0.641 against 0.583;
        ``benchmarks/results/auto.md``).
    shape_params
        Parameters of ``shape`` (its ``burn_in``, ``burn_in_min``, ``min_acf`` and ``p_min``
        also set the routing checkpoints and test, whichever ``period`` detector runs).
    period
        The detector of the keys with a clear period. ``"shape+class"`` (default): ``shape``
        from the checkpoint that found the period, the key's records buffered (at most
        ``class``'s warm-up), then ``class`` once the key has 500 records, replaying them
        (``shape`` is dropped). ``"class"``: ``class`` at once (it cannot alarm before its
        warm-up). ``"shape"``: ``shape`` throughout (it sees changes of amplitude, which
        ``class``'s z-normalised subsequences do not). Chosen by rules declared before the
        scores (``benchmarks/results/auto.md``, "The period route: ``shape`` until
        ``class``'s warm-up"): mean covering over the three development sets 0.729 against
        0.712 for ``"class"``; TCPD's short periodic series are ``shape``'s.
    class_params
        Parameters of ``class`` (``period="class"`` or ``aperiodic="class"``).
    aperiodic
        What a key without a clear period goes to. ``"class"`` (default): the level detector
        first, then ``class`` once the key has ``class``'s warm-up (500 records), replaying
        the buffered first records; the level detector's earlier alarms stand. ``"level"``
        keeps it with the level detector. Multichannel keys follow ``multichannel``; keys
        shorter than the warm-up stay on the level route.
    level_gate
        ``3.0`` (default): on a univariate key the level detector keeps running beside the
        routed detector, and each of its alarms is kept only if the effect size of its
        located change (``|mean(after) - mean(before)| / pooled sd``, ``before`` since the
        last located change, at most 1,000 values) is at least this; an alarm within 32
        records of a change the other detector located is dropped as the same change.
        ``None``: no gate, and the routed detector alone after routing. Chosen on the
        development data by a rule declared before the scores: mean covering over tssb-dev,
        mocap6 and River's TCPD series 0.730 against 0.641 for the earlier default
        (``benchmarks/results/auto.md``, "Class and a gated level detector side by side").
    multichannel_delta
        ADWIN's ``delta`` on a multichannel key (``0.2``, default; each channel's ADWIN);
        ``None``: ``level_params``' (River's 0.002). Chosen on the multichannel development
        sets by a rule declared before the scores: mean covering over mocap6 and mts-dev
        0.620 against 0.582 (mts-dev 0.569 against 0.447, but mocap6 0.672 against 0.717;
        ``benchmarks/results/auto.md``, "The multichannel keys' ADWIN delta"). On 18,000
        quiet i.i.d. records of 3 channels it raised 7 false alarms (0 with 0.002).
    multichannel_gate
        ``None`` (default): a multichannel key's level alarms are all kept. A number: the
        level gate of ``level_gate`` on a multichannel key, the effect size taken on each
        channel and the largest kept (a change in any one channel passes).
    multichannel_restart
        ``True``: at a multichannel key's level alarm every channel's ADWIN restarts from the
        located change (the River adapter's ``restart``), not only the channels that alarmed.
        ``False`` (default): it lost its declared round (``benchmarks/results/auto.md``, "One
        change, one restart"; with delta 0.2 mean covering +0.011 but F1@1% -0.006). With
        ``multichannel_delta=None`` it covered mocap6's long segments best (0.752 against
        per-channel ADWIN's 0.717) and mts-dev's short ones worst (0.454).
    level_gate_stat
        How the gate's effect size is computed: ``"mean"`` (default, as declared), or the
        robust forms ``"median"`` (medians, pooled MAD) and ``"winsorised"`` (each side
        clipped to its median +- 5 robust sd). Weakness of ``"mean"``: a value ``S`` sd out
        in the window multiplies the pooled variance by about ``1 + S^2 / n``, so a 50-sd
        spike among 250 values hides a 6-sd shift until a located change passes it; the
        robust forms lost on the development data (tssb-dev's waveforms are not bell-shaped)
        but do not go deaf after a spike.
    level_params
        Parameters of the level detector, River's ADWIN (e.g. ``{"delta": 0.002}``).
    level
        The level route. ``"adwin"`` (default): ``standardize`` -> ADWIN alone.
        ``"relay"``: ``cs`` (its defaults, long-run scale) runs beside ADWIN from the key's
        first record; a record's output is ``cs``'s when ``cs`` alarms on it or is bounded on
        every channel after it (its burn-in over), otherwise ADWIN's, and each ``cs`` alarm
        restarts ADWIN so a change is not reported twice. ``"handover"``: ADWIN until ``cs``
        is first bounded, then ``cs`` alone. ``cs``'s interval accounts for autocorrelation,
        ADWIN's bound does not: on seeded AR(1) 0.9 streams without change the relay has 6.4
        false alarms per 3,000 records against ADWIN's 20.0, and on tssb-dev's aperiodic series
        far fewer; but on the development data it lost F1@1% (0.546 against 0.563, mean over
        the three sets; TCPD's Bitcoin: after ``cs``'s burn-in it misses changes ADWIN finds),
        so by the rule declared before the run the default stays ``"adwin"``
        (``benchmarks/results/auto.md``, "The level route: ADWIN first, ``cs`` once it can
        judge"; ``benchmarks/auto_handover.py``). For long, autocorrelated level signals the
        relay is the better route.
    strictness
        One knob for both routes, the one ``shiftwatch calibrate`` searches (larger: fewer
        alarms; 1, the default, leaves every route at its own default): ``shape``'s threshold
        is multiplied by it and ADWIN's ``delta`` (``cs``'s ``alpha`` on the relay) raised to
        its power. Both are thresholds on a squared scale (``shape``'s ``Z`` is a squared
        distance over its standard error; ADWIN's cut ``eps^2`` and ``cs``'s radius grow with
        ``log(1 / delta)``), so one factor moves both alike.

    Examples
    --------
    A sine whose period changes at 1500 is ``shape``'s from its checkpoint, ``class``'s from
    record 500 (``class`` finds the change); a 4-sd level shift in noise
    is the level detector's (its effect size, about 4, passes the gate's 3; a 1.5-sd shift
    would not):

    >>> rng = np.random.default_rng(3)
    >>> t = np.arange(3000)
    >>> y = np.where(t < 1500, np.sin(2 * np.pi * t / 10), np.sin(2 * np.pi * t / 17))
    >>> op = AutoDetect()
    >>> outs = op.process_batch([{"ts": i, "value": float(v)}
    ...                          for i, v in enumerate(y + 0.3 * rng.normal(size=3000))])
    >>> [(o["route"], o["change_at"]) for o in outs if o["alarm"]]
    [('class', 1496)]
    >>> z = np.r_[rng.normal(0, 1, 600), rng.normal(4, 1, 600)]
    >>> op = AutoDetect()
    >>> outs = op.process_batch([{"ts": i, "value": float(v)} for i, v in enumerate(z)])
    >>> [(o["route"], o["change_at"]) for o in outs if o["alarm"]]
    [('level', 600)]
    """

    input_kind = "number or vector (channels)"
    #: one knob for both routes (``shiftwatch calibrate``); see ``strictness``
    sensitivity = Sensitivity("strictness", more_alarms="smaller", low=0.1, high=10.0)

    def __init__(self, field: str = "value", multichannel: str = "level",
                 shape_params: Mapping | None = None, level_params: Mapping | None = None,
                 level: str = "adwin", strictness: float = 1.0, period: str = "shape+class",
                 class_params: Mapping | None = None, aperiodic: str = "class",
                 level_gate: float | None = 3.0, level_gate_stat: str = "mean",
                 multichannel_delta: float | None = 0.2,
                 multichannel_gate: float | None = None, multichannel_restart: bool = False):
        self.field = field
        self.multichannel = multichannel
        self.level = level
        self.strictness = strictness
        self.shape_params = shape_params
        self.level_params = level_params
        self.period = period
        self.class_params = class_params
        self.aperiodic = aperiodic
        self.level_gate = level_gate
        self.level_gate_stat = level_gate_stat
        self.multichannel_delta = multichannel_delta
        self.multichannel_gate = multichannel_gate
        self.multichannel_restart = multichannel_restart
        self._validate_params()
        self._reset()

    def _validate_params(self) -> None:
        if not isinstance(self.field, str) or not self.field:
            raise ValueError(f"field must be a non-empty string, got {self.field!r}")
        if self.multichannel not in _MULTI:
            raise ValueError(f"multichannel must be one of {_MULTI}, got {self.multichannel!r}")
        if self.level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {self.level!r}")
        if self.period not in _PERIODS:
            raise ValueError(f"period must be one of {_PERIODS}, got {self.period!r}")
        if self.aperiodic not in _APERIODIC:
            raise ValueError(f"aperiodic must be one of {_APERIODIC}, got {self.aperiodic!r}")
        for name in ("level_gate", "multichannel_gate"):
            g = getattr(self, name)
            if g is not None and (isinstance(g, bool) or not isinstance(
                    g, (int, float, np.integer, np.floating)) or not (np.isfinite(g) and g > 0)):
                raise ValueError(f"{name} must be a positive number or None, got {g!r}")
        if not isinstance(self.multichannel_restart, bool):
            raise ValueError(f"multichannel_restart must be true or false, got "
                             f"{self.multichannel_restart!r}")
        md = self.multichannel_delta
        if md is not None and (isinstance(md, bool) or not isinstance(
                md, (int, float, np.integer, np.floating)) or not 0 < md < 1):
            raise ValueError(f"multichannel_delta must be in (0, 1) or None, got {md!r}")
        if self.level_gate_stat not in GATE_STATS:
            raise ValueError(f"level_gate_stat must be one of {GATE_STATS}, got "
                             f"{self.level_gate_stat!r}")
        k = self.strictness
        if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)) \
                or not (np.isfinite(k) and k > 0):
            raise ValueError(f"strictness must be a positive number, got {k!r}")
        if k != 1 and self._base("shape", "threshold") == "null":
            raise ValueError("strictness needs a numeric shape threshold (shape_params has "
                             "threshold='null'); set the rate false_alarms_per_100_periods "
                             "instead")
        for name in ("shape_params", "level_params", "class_params"):
            v = getattr(self, name)
            if v is not None and not isinstance(v, Mapping):
                raise ValueError(f"{name} must be a mapping of parameters, got {v!r}")
            if v and "field" in v:
                raise ValueError(f"{name} may not set field (auto's own field is used)")
        self._new_shape()
        self._new_level()

    def _base(self, name: str, param: str) -> Any:
        """The value of ``param`` the route ``name`` gets before ``strictness``: the user's
        (``shape_params``/``level_params``) or the operator's default."""
        given = {"shape": self.shape_params, "river:ADWIN": self.level_params,
                 "class": self.class_params}.get(name)
        if given and param in given:
            return given[param]
        if (name, param) not in _DEFAULTS:
            _DEFAULTS[(name, param)] = create(name).all_params()[param]
        return _DEFAULTS[(name, param)]

    def _new_class(self) -> Operator:
        params = dict(self.class_params or {})
        if self.strictness != 1:  # a p-value: raised to the power, as ADWIN's delta; the
            # floor keeps it a positive float (1e-50 ** 7 underflows to 0)
            params["threshold"] = max(
                float(self._base("class", "threshold")) ** self.strictness, _P_FLOOR)
        return create("class", **params)

    def _new_shape(self) -> Operator:
        """The period route's detector (``shape``, or ``class`` with ``period="class"``)."""
        if self.period == "class":
            return self._new_class()
        params = dict(self.shape_params or {})
        if self.strictness != 1:  # a threshold on Z, a squared distance: times strictness
            params["threshold"] = float(self._base("shape", "threshold")) * self.strictness
        return create("shape", **params)

    def _new_level(self) -> list[Operator]:
        return [create("standardize"), self._new_adwin()]

    def _new_adwin(self) -> Operator:
        params = dict(self.level_params or {})
        multi = (getattr(self, "_c", None) or 1) > 1
        if self.multichannel_delta is not None and multi:
            params["delta"] = float(self.multichannel_delta)  # a multichannel key's
        if self.multichannel_restart and multi:
            params["restart"] = True
        if self.strictness != 1:  # ADWIN's cut: eps^2 grows with log(1 / delta)
            params["delta"] = float(params.get("delta", self._base("river:ADWIN", "delta"))) \
                ** self.strictness
        return create("river:ADWIN", **params)

    def _multi_adwin(self) -> bool:
        """A multichannel key's ADWIN differs from ``level_params``' (made when ``_c`` is)."""
        return self.multichannel_delta is not None or self.multichannel_restart

    def _new_cs(self) -> Operator | None:
        if self.level == "adwin":
            return None
        if self.strictness == 1:
            return create("cs")
        return create("cs", alpha=float(self._base("cs", "alpha")) ** self.strictness)

    def _own_warm_up(self) -> int | None:
        """The smaller of the two routes' warm-ups (the level detector runs from the first
        record)."""
        got = [v for v in (self._new_level()[1].warm_up(), self._new_shape().warm_up())
               if v is not None]
        return min(got) if got else None

    def _routing(self) -> dict:
        p = create("shape", **(self.shape_params or {})).all_params()
        return {k: p[k] for k in ("burn_in", "burn_in_min", "min_acf", "p_min")}

    def _reset(self) -> None:
        self._route = "deciding"
        self._c: int | None = None
        self._buf = np.zeros((0, 0))
        self._bts = np.zeros(0)
        self._level: list[Operator] | None = self._new_level()
        self._shape: Operator | None = None
        # level="handover"/"relay": cs beside ADWIN; records the level route has taken; the
        # position of the running ADWIN's first record; handover done (ADWIN dropped)
        self._cs: Operator | None = self._new_cs()
        self._nlev = 0
        self._adwin_at = 0
        self._handed = False
        # aperiodic="class": no clear period was found; the key waits (buffered, the level
        # detector running) for class's warm-up
        self._pending = False
        # level_gate: the gate of a univariate key (made at its first record)
        self._gate: LevelGate | None = None
        rule = self._routing()
        self._rule = rule
        self._checks = checkpoints(rule["burn_in_min"], rule["burn_in"])

    # ---- state ------------------------------------------------------------------------

    def state_dict(self) -> dict:
        st: dict[str, Any] = {"route": self._route, "c": self._c,
                              "buf": self._buf.copy(), "bts": self._bts.copy()}
        st["level"] = None if self._level is None else [op.state_dict() for op in self._level]
        st["shape"] = None if self._shape is None else self._shape.state_dict()
        if self.level != "adwin":
            st["cs"] = None if self._cs is None else self._cs.state_dict()
            st.update(nlev=self._nlev, adwin_at=self._adwin_at, handed=self._handed)
        if self.aperiodic != "level":
            st["pending"] = self._pending
        if self._gated:
            st["gate"] = None if self._gate is None else self._gate.state_dict()
        return {"operator": self.name or type(self).__name__, "state": st}

    def load_state_dict(self, state: Mapping) -> None:
        payload = self._state_payload(state)
        self._reset()
        route = payload["route"]
        if route not in _ROUTES:
            raise ValueError(f"state_dict has an unknown route {route!r}")
        self._route = route
        self._c = None if payload["c"] is None else int(payload["c"])
        self._buf = np.array(payload["buf"], dtype=np.float64).reshape(len(payload["bts"]),
                                                                       self._c or 0)
        self._bts = np.array(payload["bts"], dtype=np.float64)
        if payload["level"] is None:
            self._level = None
        else:
            if (self._c or 1) > 1 and self._multi_adwin():
                self._level[1] = self._new_adwin()
            for op, s in zip(self._level, payload["level"], strict=True):
                op.load_state_dict(s)
        if self.level != "adwin":
            if "cs" not in payload:
                raise ValueError(f"state_dict is not level={self.level!r}'s (no cs state)")
            if payload["cs"] is None or self._level is None:
                self._cs = None
            else:
                self._cs.load_state_dict(payload["cs"])
            self._nlev, self._adwin_at = int(payload["nlev"]), int(payload["adwin_at"])
            self._handed = bool(payload["handed"])
        if self.aperiodic != "level":
            if "pending" not in payload:
                raise ValueError(f"state_dict is not aperiodic={self.aperiodic!r}'s")
            self._pending = bool(payload["pending"])
        elif route == "class" or "pending" in payload:
            raise ValueError("state_dict is aperiodic='class''s, this operator's aperiodic is "
                             "'level'")
        if self._gated:
            if "gate" not in payload:
                raise ValueError("state_dict has no level gate state (level_gate or "
                                 "multichannel_gate is set)")
            if payload["gate"] is not None:
                self._gate = self._new_gate()
                self._gate.load_state_dict(payload["gate"])
        elif "gate" in payload:
            raise ValueError("state_dict has a level gate state, this operator's level_gate "
                             "and multichannel_gate are None")
        if payload["shape"] is not None:
            self._shape = self._new_routed(route)
            self._shape.load_state_dict(payload["shape"])

    # ---- processing ---------------------------------------------------------------------

    def _read(self, record: Mapping) -> np.ndarray:
        x = as_array(get_field(record, self.field), name=self.field, max_abs=self.max_abs)
        if x.ndim > 1:
            raise BadInput(f"{self.field} must be a number or a vector, got shape {x.shape}")
        x = x.reshape(-1)
        if x.size == 0:
            raise BadInput(f"{self.field} is an empty vector")
        if self._c is not None and x.size != self._c:
            raise BadInput(f"{self.field} has {x.size} channels, earlier values had {self._c}")
        return x

    @staticmethod
    def _inner(record: Mapping, x: np.ndarray | float) -> dict:
        """The record the routed detector gets: ``value`` (a float for one channel) and
        ``ts``; ``x`` a read value, or a plain float from the batch path's hot path."""
        if type(x) is float:
            rec = {"value": x}
        else:
            rec = {"value": float(x[0]) if x.size == 1 else x.tolist()}
        ts = record.get("ts")
        if ts is not None:
            rec["ts"] = ts
        return rec

    def _run_level(self, rec: dict) -> dict:
        got = self._level_run([rec])[0]
        if not isinstance(got, dict):
            raise BadInput(got.reason)
        return got

    def _adwin_batch(self, inner: list[dict]) -> list:
        """``standardize`` -> ADWIN over records; positions counted from the key's start."""
        if not inner:
            return []
        std, det = self._level
        got = std.process_batch(inner)
        ok = iter(det.process_batch([o for o in got if isinstance(o, dict)]))
        got = [next(ok) if isinstance(o, dict) else o for o in got]
        if self._adwin_at:  # a restarted ADWIN counts from its first record
            for o in got:
                if isinstance(o, dict) and "change_at" in o:
                    o["change_at"] += self._adwin_at
                    if "changes_at" in o:
                        o["changes_at"] = [v + self._adwin_at for v in o["changes_at"]]
        return got

    def _level_batch(self, inner: list[dict]) -> list:
        """The level route over records (``level=``: ADWIN, the handover, the relay)."""
        cs = self._cs
        if self.level == "adwin":
            got = self._adwin_batch(inner)
        elif self._handed:
            got = cs.process_batch(inner)
        else:
            c = cs.process_batch(inner)
            judges = [isinstance(o, dict) and (o.get("alarm") or _bounded(o)) for o in c]
            if self.level == "handover":
                i = judges.index(True) if True in judges else len(inner)
                got = self._adwin_batch(inner[:i]) + c[i:]
                self._handed = i < len(inner)
            else:  # relay: cs where it judges; ADWIN restarted after each cs alarm
                got, start = [], 0
                ends = [j + 1 for j, o in enumerate(c) if isinstance(o, dict) and o.get("alarm")]
                for end in ends + [len(inner)]:
                    a = self._adwin_batch(inner[start:end])
                    got += [c[j] if judges[j] else a[j - start] for j in range(start, end)]
                    if end in ends:
                        self._level[1] = self._new_adwin()
                        self._adwin_at = self._nlev + end
                    start = end
        self._nlev += len(inner)
        return got

    def _level_run(self, inner: list[dict]) -> list:
        """The level route over records; with ``level_gate`` on a univariate key, its
        alarms are judged by the gate."""
        gate = self._gate
        if gate is None:
            return self._level_batch(inner)
        n0 = gate.count
        gate.push([r["value"] for r in inner])
        got = self._level_batch(inner)
        self._judge(got, None, n0)
        gate.trim()
        return got

    def _routed_run(self, inner: list[dict]) -> list:
        """The routed detector over records; with ``period="shape+class"`` a ``shape`` key
        goes to ``class`` at its warm-up (the records buffered until then)."""
        if not (self._route == "shape" and self.period == "shape+class"):
            return self._routed_core(inner)
        k = max(0, int(self._base("class", "n_warmup")) - len(self._buf))
        got = self._routed_core(inner[:k]) if k else []
        head = inner[:k]
        if head:
            self._buf = np.vstack([self._buf, np.asarray([r["value"] for r in head],
                                                         dtype=np.float64).reshape(len(head), -1)])
            ts = [numeric_ts(r) for r in head]
            self._bts = np.append(self._bts, [np.nan if t is None else t for t in ts])
        if k >= len(inner) and len(self._buf) < int(self._base("class", "n_warmup")):
            return got
        for o in got:  # made by shape: their label is fixed before the route changes
            if isinstance(o, dict):
                o.setdefault("_route", "shape")
        handed = self._replay_into("class")  # class takes the key: shape is dropped
        if handed.get("alarm") and got and isinstance(got[-1], dict):
            o = got[-1]
            if o.get("alarm"):
                ch = sorted(set(o.get("changes_at") or [o["change_at"]])
                            | set(handed.get("changes_at") or [handed["change_at"]]))
                o["change_at"], o["changes_at"] = ch[-1], ch
            else:
                o.update({f: v for f, v in handed.items() if f in _CARRY})
                o["_route"] = "class"
        return got + (self._routed_core(inner[k:]) if k < len(inner) else [])

    def _routed_core(self, inner: list[dict]) -> list:
        """The routed detector over records; with ``level_gate`` the level detector runs
        beside it, and its kept alarms are merged into the routed outputs."""
        got = self._shape.process_batch(inner)
        gate = self._gate
        if gate is None or self._level is None:
            return got
        n0 = gate.count
        gate.push([r["value"] for r in inner])
        self._judge(self._level_batch(inner), got, n0)
        gate.trim()
        return got

    def _judge(self, level: list, routed: list | None, n0: int) -> None:
        """Judge, record by record, the routed detector's alarms (duplicates of a level
        change dropped) and then the level detector's (the gate); a kept level alarm is
        merged into the routed output (``routed``) or stays the output (``routed=None``)."""
        gate = self._gate
        for j, lv in enumerate(level):
            at = n0 + j
            r = None if routed is None else routed[j]
            if isinstance(r, dict) and r.get("alarm"):
                kept = [c for c in (r.get("changes_at") or [r["change_at"]])
                        if gate.judge(int(c), at, "routed")]
                if not kept:
                    routed[j] = r = _cleared(r)
                elif len(kept) < len(r.get("changes_at") or [0]):
                    r["change_at"] = kept[-1]
                    r["changes_at"] = kept
            if not (isinstance(lv, dict) and lv.get("alarm")):
                continue
            if not gate.judge(int(lv["change_at"]), at, "level"):
                level[j] = _cleared(lv)
            elif isinstance(r, dict):
                _merge(r, lv)

    @property
    def _gated(self) -> bool:
        """Some key kind has a gate (the state then says whether this key's exists)."""
        return self.level_gate is not None or self.multichannel_gate is not None

    def _new_gate(self) -> LevelGate:
        c = self._c or 1
        return LevelGate(self.level_gate if c == 1 else self.multichannel_gate,
                         stat=self.level_gate_stat, channels=c)

    def _new_routed(self, route: str) -> Operator:
        """The detector of a routed key: ``class`` for ``route="class"`` (an aperiodic key),
        else the period route's (:meth:`_new_shape`)."""
        return self._new_class() if route == "class" else self._new_shape()

    def _to_shape(self, route: str, level_out: dict) -> dict:
        """Route to ``shape`` (the period route's detector; ``class`` for ``route="class"``):
        replay the buffer and keep the alarms it raised; the level detector's output on this
        record, ``level_out``, stands if its alarm is the only one."""
        out = self._replay_into(route)
        if self._gate is not None and level_out.get("alarm") and out.get("alarm"):
            _merge(out, level_out)
            return out
        return level_out if level_out.get("alarm") and not out.get("alarm") else out

    def _replay_into(self, route: str) -> dict:
        self._shape = shape = self._new_routed(route)
        recs = []
        for i in range(len(self._buf)):
            r = self._inner({}, self._buf[i])
            if np.isfinite(self._bts[i]):
                r["ts"] = float(self._bts[i])
            recs.append(r)
        outs = shape.process_batch(recs)
        bts = self._bts
        self._route = route
        if self._gate is None:  # with the gate the level detector runs on beside it
            self._level, self._cs = None, None
        self._pending = False
        if not (route == "shape" and self.period == "shape+class"):  # (kept for class)
            self._buf, self._bts = np.zeros((0, self._c)), np.zeros(0)
        found = []
        for o in outs:
            if o.get("alarm"):
                found += list(o.get("changes_at") or [o["change_at"]])
        last = outs[-1]
        found = sorted(set(int(v) for v in found))
        if self._gate is not None:  # the level detector's changes are not found again
            at = self._gate.count - 1
            found = [c for c in found if self._gate.judge(c, at, "routed")]
        if not found:
            if last.get("alarm"):
                last = _cleared(last)
            return last
        alarm = {**last, "alarm": True, "change_at": found[-1]}
        if len(found) > 1:
            alarm["changes_at"] = found
        alarm.pop("change_ts", None)
        if 0 <= found[-1] < len(bts) and np.isfinite(bts[found[-1]]):
            alarm["change_ts"] = float(bts[found[-1]])
        return alarm

    def process(self, record: Mapping) -> list[dict]:
        x = self._read(record)  # BadInput leaves the state untouched
        rec = self._inner(record, x)
        if self._route in ("shape", "class") and (self._gate is not None
                                                  or self.period == "shape+class"):
            inner = self._routed_run([rec])[0]
            if not isinstance(inner, dict):
                raise BadInput(inner.reason)
        elif self._route in ("shape", "class"):
            inner = self._shape.process(rec)[-1]
        elif self._route == "level":
            inner = self._run_level(rec)
        else:
            inner = self._decide(record, x, rec)
        out = self._output(record, route=inner.get("_route") or self._label())
        for f in _CARRY:
            if f in inner:
                out[f] = inner[f]
        return [out]

    def _label(self) -> str:
        """The ``route`` field of the outputs: the detector that made them."""
        if self._route == "shape":
            return "shape" if self.period == "shape+class" else self.period
        return "class" if self._route == "class" else "level"

    def process_batch(self, records) -> list:
        """Same outputs as :meth:`process` in a loop; once a key is routed, runs of valid
        records go through the routed detector's own batch path."""
        out: list = []
        run: list[tuple[Mapping, dict]] = []
        field, hi = self.field, self.max_abs
        plain = "." not in field
        for record in records:
            if self._c == 1 and plain and type(record) is dict and self._route != "deciding":
                v = record.get(field)  # the hot path: a plain number in range
                if (type(v) is float or type(v) is int) and -hi <= v <= hi:
                    run.append((record, self._inner(record, float(v))))
                    continue
            if self._route == "deciding":
                self._flush(run, out)
                run = []
                try:
                    out.extend(self.process(record))
                except BadInput as exc:
                    out.append(self._dead_letter(record, exc))
                continue
            try:
                run.append((record, self._inner(record, self._read(record))))
            except BadInput as exc:
                self._flush(run, out)
                run = []
                out.append(self._dead_letter(record, exc))
        self._flush(run, out)
        return out

    def _flush(self, run: list[tuple[Mapping, dict]], out: list) -> None:
        if not run:
            return
        inner = [r for _, r in run]
        if self._route in ("shape", "class"):
            got = self._routed_run(inner)
        else:
            got = self._level_run(inner)
        for (record, _), o in zip(run, got, strict=True):
            if not isinstance(o, dict):  # the inner detector refused what _read took
                out.append(self._dead_letter(record, BadInput(o.reason)))
                continue
            res = self._output(record, route=o.get("_route") or self._label())
            for f in _CARRY:
                if f in o:
                    res[f] = o[f]
            out.append(res)

    def _decide(self, record: Mapping, x: np.ndarray, rec: dict) -> dict:
        if self._c is None:
            self._c = int(x.size)
            self._buf = np.zeros((0, self._c))
            if self._c > 1 and self._multi_adwin():
                self._level[1] = self._new_adwin()  # (no record seen yet)
            if (self.level_gate if self._c == 1 else self.multichannel_gate) is not None:
                self._gate = self._new_gate()
        level_out = self._run_level(rec)
        t = numeric_ts(record)
        t = np.nan if t is None else t
        self._buf = np.vstack([self._buf, x[None, :]])
        self._bts = np.append(self._bts, t if np.isfinite(t) else np.nan)
        n = len(self._buf)
        found = None
        if self._pending:  # aperiodic="class": hand the key to class at its warm-up
            return self._decide_pending(level_out)
        if n in self._checks and (self._c == 1 or self.multichannel == "period"):
            rule = self._rule
            found = time_scale_rule(self._buf, rule["burn_in_min"], rule["burn_in"],
                                    rule["p_min"], rule["min_acf"])
            if found is not None and found["rule"] in CLEAR_RULES:
                return self._to_shape("shape", level_out)
        if found is not None or n >= self._rule["burn_in"] or (
                self._c > 1 and self.multichannel == "level"):
            if self.aperiodic == "class" and (self._c == 1 or self.multichannel == "period"):
                self._pending = True  # no clear period: class at its warm-up
                return self._decide_pending(level_out)
            self._route = "level"
            self._buf, self._bts = np.zeros((0, self._c)), np.zeros(0)
        return level_out

    def _decide_pending(self, level_out: dict) -> dict:
        """A key without a clear period under ``aperiodic="class"``: hand it to ``class`` once
        it has class's warm-up (the level detector's alarm stands if class raised none)."""
        if len(self._buf) >= int(self._base("class", "n_warmup")):
            return self._to_shape("class", level_out)
        return level_out

    @classmethod
    def _unit_test_params(cls):
        yield {}
        yield {"period": "shape", "aperiodic": "level", "level_gate": None}
        yield {"level_gate_stat": "median", "class_params": {"window": 400, "n_warmup": 100}}
        yield {"multichannel": "period", "level_params": {"delta": 0.01}}
        yield {"multichannel_restart": True, "multichannel_delta": None}
        yield {"level": "relay"}
        yield {"level": "handover", "multichannel": "period"}
        yield {"period": "class", "class_params": {"window": 400, "n_warmup": 100}}
        yield {"aperiodic": "class", "class_params": {"window": 400, "n_warmup": 100}}

    @classmethod
    def _test_stream(cls, params: dict, n: int = 600, seed: int = 0) -> list[dict]:
        # a period-12 cycle whose amplitude doubles at n // 2 (routed to shape)
        rng = np.random.default_rng(seed)
        t = np.arange(n)
        y = np.sin(2 * np.pi * t / 12) * np.where(t < n // 2, 1.0, 2.0)
        return [{"key": "k", "ts": float(i), "offset": i, "value": float(v)}
                for i, v in enumerate(y + 0.1 * rng.normal(size=n))]


def _cleared(out: dict) -> dict:
    """An output whose alarm the gate dropped: no alarm, no located change."""
    drop = ("change_at", "change_ts", "changes_at")
    return {**{k: v for k, v in out.items() if k not in drop}, "alarm": False}


def _merge(routed: dict, level: dict) -> None:
    """Merge a kept level alarm into the routed detector's output of the same record."""
    if not routed.get("alarm"):
        routed.update({k: v for k, v in level.items() if k in _CARRY})
        routed["_route"] = "level"
        return
    changes = sorted(set(routed.get("changes_at") or [routed["change_at"]])
                     | {int(level["change_at"])})
    if changes[-1] != routed["change_at"] and changes[-1] == level["change_at"]:
        routed.pop("change_ts", None)
        if "change_ts" in level:
            routed["change_ts"] = level["change_ts"]
    routed["change_at"] = changes[-1]
    routed["changes_at"] = changes
