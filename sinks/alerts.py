"""Alarms that reach a person: POST each alarm as JSON to a URL (a webhook, a Slack-compatible
incoming webhook, an alert manager's API).

The sink never blocks nor loses the stage's outputs: :meth:`WebhookAlertSink.write` only puts
alarms on a bounded queue; a background thread delivers them with retries and exponential
backoff. When the endpoint is slow, failing or refusing, deliveries are counted as failed (and
the oldest queued alarms dropped when the queue is full, counted too), never raised into the
runner; outputs go to their topic or file as before. A per-key rate limit keeps a flapping
key from flooding a channel (alarms over the limit are counted as ``suppressed``).

Payloads: ``format="json"`` posts ``{"source": "shiftwatch", "pipeline", "stage", "alarm":
<the output record>}``; ``format="slack"`` posts ``{"text": "..."}`` (Slack, Mattermost and
Teams-compatible incoming webhooks read ``text``).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from shiftwatch.codec import jsonable, key_text
from shiftwatch.sinks.base import Sink

__all__ = ["WebhookAlertSink", "ALERT_FORMATS"]

log = logging.getLogger("shiftwatch.alerts")

ALERT_FORMATS = ("json", "slack")


class WebhookAlertSink(Sink):
    """POST every alarm (an output with a truthy ``alarm``) to ``url``.

    Parameters
    ----------
    url
        An ``http://`` or ``https://`` URL.
    format
        ``"json"`` (the alarm record in an envelope) or ``"slack"`` (``{"text": ...}``).
    pipeline, stage
        Named in the payload and the message.
    retries
        Attempts after the first for one alarm (a 5xx answer, a timeout, a refused
        connection); a 4xx answer other than 408 and 429 is not retried.
    backoff_s
        The first wait between attempts (doubled each time, at most ``max_backoff_s``).
    max_backoff_s
        The longest wait between attempts.
    timeout_s
        Per request.
    per_key_per_minute
        At most this many alarms of one key are sent in any minute (the rest are
        ``suppressed``); ``None`` for no limit.
    queue_size
        Alarms waiting for delivery, at most (the oldest is dropped beyond, counted).
    metrics
        Optional object with ``alert(outcome)`` (the stage's metrics: ``sent``, ``failed``,
        ``dropped``, ``suppressed``).

    Examples
    --------
    >>> sink = WebhookAlertSink("http://127.0.0.1:9/hook", retries=0, timeout_s=0.5)
    >>> sink.payload({"key": "pump-a", "ts": 1700000000.0, "alarm": True, "statistic": 7.1,
    ...               "threshold": 6.0, "change_at": 3012})["alarm"]["key"]
    'pump-a'
    """

    def __init__(self, url: str, format: str = "json", pipeline: str | None = None,
                 stage: str | None = None, retries: int = 3, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0, timeout_s: float = 5.0,
                 per_key_per_minute: int | None = 10, queue_size: int = 10_000,
                 metrics: Any = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"alert url must start with http:// or https://, got {url!r}")
        if format not in ALERT_FORMATS:
            raise ValueError(f"alert format must be one of {', '.join(ALERT_FORMATS)}, "
                             f"got {format!r}")
        for name, v, lo in (("retries", retries, 0), ("queue_size", queue_size, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"alert {name} must be an integer >= {lo}, got {v!r}")
        for name, v in (("backoff_s", backoff_s), ("max_backoff_s", max_backoff_s),
                        ("timeout_s", timeout_s)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < math.inf:
                raise ValueError(f"alert {name} must be a number > 0, got {v!r}")
        if per_key_per_minute is not None and (not isinstance(per_key_per_minute, int)
                                               or isinstance(per_key_per_minute, bool)
                                               or per_key_per_minute < 1):
            raise ValueError("alert per_key_per_minute must be an integer >= 1 or null, got "
                             f"{per_key_per_minute!r}")
        self.url = url
        self.format = format
        self.pipeline = pipeline
        self.stage = stage
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.per_key_per_minute = per_key_per_minute
        self.queue_size = queue_size
        self.metrics = metrics
        self.counts = {"sent": 0, "failed": 0, "dropped": 0, "suppressed": 0}
        self.last_error: str | None = None
        self._queue: deque[dict] = deque()
        self._lock = threading.Condition()
        self._recent: dict[str, deque[float]] = {}
        self._closing = False
        self._thread: threading.Thread | None = None

    # ---- the runner's side ---------------------------------------------------------------

    def open(self) -> None:
        """Start the delivery thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._deliver_loop, daemon=True,
                                            name="shiftwatch-alerts")
            self._thread.start()

    def write(self, records: Sequence[dict]) -> None:
        """Queue the alarms of a batch; returns at once."""
        now = time.monotonic()
        for r in records:
            if not isinstance(r, Mapping) or not r.get("alarm"):
                continue
            if not self._allowed(key_text(r.get("key")), now):
                self._count("suppressed")
                continue
            with self._lock:
                if len(self._queue) >= self.queue_size:
                    self._queue.popleft()
                    self._count("dropped")
                self._queue.append(dict(r))
                self._lock.notify()
        if self._thread is None:
            self.open()

    def close(self, wait_s: float = 10.0) -> None:
        """Deliver what is queued for at most ``wait_s`` seconds, then stop (what is left is
        counted as dropped)."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=wait_s)
        with self._lock:
            left = len(self._queue)
            self._queue.clear()
        for _ in range(left):
            self._count("dropped")

    def summary(self) -> dict:
        out: dict[str, Any] = {"url": self.url, **self.counts}
        if self.last_error:
            out["last_error"] = self.last_error
        return out

    # ---- payloads ------------------------------------------------------------------------

    def payload(self, alarm: Mapping) -> dict:
        """What is posted for one alarm."""
        if self.format == "slack":
            return {"text": self.text(alarm)}
        return {"source": "shiftwatch", "pipeline": self.pipeline, "stage": self.stage,
                "alarm": jsonable(dict(alarm))}

    def text(self, alarm: Mapping) -> str:
        """One line a person reads: where, when, what crossed, where the change began."""
        where = "/".join(p for p in (self.pipeline, self.stage) if p)
        parts = [f"shiftwatch{' ' + where if where else ''}: alarm on key "
                 f"{key_text(alarm.get('key'))}"]
        ts = alarm.get("ts")
        if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts):
            from shiftwatch.sinks.time_axis import is_epoch_seconds, iso_utc

            parts.append(f"at {iso_utc(ts) if is_epoch_seconds([ts]) else ts}")
        stat, thr = alarm.get("statistic"), alarm.get("threshold")
        if isinstance(stat, (int, float)) and isinstance(thr, (int, float)):
            parts.append(f"statistic {stat:.4g} > threshold {thr:.4g}")
        if alarm.get("change_at") is not None:
            parts.append(f"change located at position {alarm['change_at']}")
        return ", ".join(parts)

    # ---- delivery ------------------------------------------------------------------------

    def _allowed(self, key: str, now: float) -> bool:
        if self.per_key_per_minute is None:
            return True
        q = self._recent.setdefault(key, deque())
        while q and now - q[0] >= 60.0:
            q.popleft()
        if len(q) >= self.per_key_per_minute:
            return False
        q.append(now)
        if len(self._recent) > 100_000:  # bounded: forget keys quiet for a minute
            self._recent = {k: v for k, v in self._recent.items() if v and now - v[-1] < 60}
        return True

    def _count(self, outcome: str) -> None:
        self.counts[outcome] += 1
        if self.metrics is not None:
            try:
                self.metrics.alert(outcome)
            except Exception:  # a metric must never cost an alarm
                pass

    def _deliver_loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._lock.wait(timeout=1.0)
                if not self._queue:
                    return
                alarm = self._queue.popleft()
            self._deliver(alarm)

    def _deliver(self, alarm: dict) -> None:
        body = json.dumps(self.payload(alarm), allow_nan=False).encode()
        wait = self.backoff_s
        for attempt in range(self.retries + 1):
            retry, error = self._post(body)
            if error is None:
                self._count("sent")
                return
            self.last_error = error
            if not retry or attempt == self.retries:
                break
            with self._lock:  # closing cuts the wait short; the attempt still happens
                if not self._closing:
                    self._lock.wait(timeout=wait)
            wait = min(2 * wait, self.max_backoff_s)
        self._count("failed")
        log.warning("alert to %s failed after %d attempt(s): %s", self.url, attempt + 1,
                    self.last_error)

    def _post(self, body: bytes) -> tuple[bool, str | None]:
        """(retry?, error or None) of one POST."""
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": "shiftwatch"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                resp.read(1024)
            return False, None
        except urllib.error.HTTPError as exc:
            return exc.code >= 500 or exc.code in (408, 429), f"HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return True, f"{type(exc).__name__}: {reason}"
