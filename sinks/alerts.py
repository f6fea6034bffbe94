"""Alarms that reach a person: POST each alarm as JSON to a URL (a webhook, a Slack-compatible
incoming webhook, an alert manager's API), or say plainly that they did not.

The delivery contract (docs/operations.md, "Delivery of alerts"):

* :meth:`WebhookAlertSink.write` never blocks the stage: it puts alarms on a bounded queue; a
  background thread POSTs them, with retries and exponential backoff (``Retry-After`` of a
  429 or 503 is honoured up to ``max_backoff_s``).
* An alarm is ``sent`` only when the endpoint itself answered 2xx. A redirect is not a
  delivery: a 307 or 308 to the same origin (scheme, host and port) re-POSTs the body, at most
  :data:`MAX_REDIRECTS` times; any other redirect is ``failed`` with its status and is not
  followed (never to another host or port, never as a body-less GET).
* ``timeout_s`` bounds the whole request (connect, send, the answer's headers and the first
  kilobyte of its body), not each socket read: an endpoint that accepts and never answers,
  or drips a byte at a time, costs at most ``timeout_s`` per attempt.
* :meth:`close` drains: it keeps delivering, honouring the backoff, for at most ``drain_s``
  seconds; what is still undelivered then (queued, or in flight) is counted ``dropped``.
* Every alarm handed to the sink ends in exactly one of ``sent``, ``failed``, ``suppressed``
  (over the per-key limit) and ``dropped`` (the queue overflowed, or the drain ended): the four
  counts always sum to the alarms. Each ``failed`` or ``dropped`` alarm is appended to the
  ``undelivered`` file as one JSON line with the exact body, the outcome and the reason;
  ``shiftwatch resend-alerts FILE --alert-url URL`` posts them again.
* The URL is a secret (Slack's and many webhooks' tokens are in the path): it is shown only as
  ``scheme://host[:port]/…`` (:func:`redact_url`) in every line, summary, log and error.

Payloads: ``format="json"`` posts ``{"source": "shiftwatch", "pipeline", "stage", "alarm":
<the output record>}``; ``format="slack"`` posts ``{"text": "..."}`` (Slack, Mattermost and
Teams-compatible incoming webhooks read ``text``).
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shiftwatch.codec import jsonable, key_text
from shiftwatch.sinks.base import Sink

__all__ = ["WebhookAlertSink", "ALERT_FORMATS", "redact_url", "resend", "MAX_REDIRECTS"]

log = logging.getLogger("shiftwatch.alerts")

ALERT_FORMATS = ("json", "slack")

#: Same-origin 307/308 hops one POST may take before it counts as failed.
MAX_REDIRECTS = 3

OUTCOMES = ("sent", "failed", "suppressed", "dropped")


def redact_url(url: Any) -> str:
    """``url`` as it may be shown: scheme, host and port; path, query, fragment and any
    user:password replaced by ``…``.

    >>> redact_url("https://hooks.slack.com/services/T0/B0/s3cr3t")
    'https://hooks.slack.com/…'
    >>> redact_url("http://user:pw@127.0.0.1:8080/?token=x")
    'http://127.0.0.1:8080/…'
    >>> redact_url("http://alerts.example.com")
    'http://alerts.example.com'
    """
    if not isinstance(url, str):
        return f"<a {type(url).__name__}, not a URL>"
    try:
        parts = urllib.parse.urlsplit(url.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<an unparseable URL>"
    if not parts.scheme or not host:
        return "<a URL without scheme://host>"
    if ":" in host:
        host = f"[{host}]"
    shown = f"{parts.scheme}://{host}{'' if port is None else f':{port}'}"
    hidden = parts.path not in ("", "/") or parts.query or parts.fragment or parts.username
    return shown + ("/…" if hidden else "")


def _origin(parts: urllib.parse.SplitResult) -> tuple:
    default = 443 if parts.scheme == "https" else 80
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


class WebhookAlertSink(Sink):
    """POST every alarm (an output with a truthy ``alarm``) to ``url``.

    Parameters
    ----------
    url
        An ``http://`` or ``https://`` URL. Shown only redacted (:func:`redact_url`).
    format
        ``"json"`` (the alarm record in an envelope) or ``"slack"`` (``{"text": ...}``).
    pipeline, stage
        Named in the payload and the message.
    retries
        Attempts after the first for one alarm (a 5xx answer, 408, 429, a timeout, a refused
        connection); another 4xx answer, and a redirect, are not retried.
    backoff_s
        The first wait between attempts (doubled each time, at most ``max_backoff_s``).
    max_backoff_s
        The longest wait between attempts (also the most a ``Retry-After`` is honoured).
    timeout_s
        The deadline of one whole request (connect, send, answer), per attempt.
    per_key_per_minute
        At most this many alarms of one key are sent in any minute (the rest are
        ``suppressed``); ``None`` for no limit.
    queue_size
        Alarms waiting for delivery, at most (the oldest is dropped beyond, counted).
    drain_s
        At :meth:`close`, how long delivery goes on (backoff honoured) before what is left is
        counted ``dropped``.
    undelivered
        A file (JSON Lines, appended) for every ``failed`` and ``dropped`` alarm: its exact
        body, outcome and reason, to re-send with ``shiftwatch resend-alerts``; ``{stage}`` is
        replaced by the stage's name. ``None``: such alarms are logged with their body.
    metrics
        Optional object with ``alert(outcome)`` (the stage's metrics: ``sent``, ``failed``,
        ``dropped``, ``suppressed``).

    Examples
    --------
    >>> sink = WebhookAlertSink("http://127.0.0.1:9/hook", retries=0, timeout_s=0.5)
    >>> sink.payload({"key": "pump-a", "ts": 1700000000.0, "alarm": True, "statistic": 7.1,
    ...               "threshold": 6.0, "change_at": 3012})["alarm"]["key"]
    'pump-a'
    >>> sink.shown_url
    'http://127.0.0.1:9/…'
    """

    def __init__(self, url: str, format: str = "json", pipeline: str | None = None,
                 stage: str | None = None, retries: int = 3, backoff_s: float = 0.5,
                 max_backoff_s: float = 30.0, timeout_s: float = 5.0,
                 per_key_per_minute: int | None = 10, queue_size: int = 10_000,
                 drain_s: float = 20.0, undelivered: str | os.PathLike | None = None,
                 metrics: Any = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"alert url must start with http:// or https://, got "
                             f"{redact_url(url) if isinstance(url, str) else repr(url)}")
        try:
            parts = urllib.parse.urlsplit(url)
            parts.port  # noqa: B018 (raises on a bad port)
        except ValueError:
            raise ValueError(f"alert url is not a valid URL: {redact_url(url)}") from None
        if not parts.hostname:
            raise ValueError(f"alert url has no host: {redact_url(url)}")
        if format not in ALERT_FORMATS:
            raise ValueError(f"alert format must be one of {', '.join(ALERT_FORMATS)}, "
                             f"got {format!r}")
        for name, v, lo in (("retries", retries, 0), ("queue_size", queue_size, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"alert {name} must be an integer >= {lo}, got {v!r}")
        for name, v in (("backoff_s", backoff_s), ("max_backoff_s", max_backoff_s),
                        ("timeout_s", timeout_s), ("drain_s", drain_s)):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < math.inf:
                raise ValueError(f"alert {name} must be a number > 0, got {v!r}")
        if per_key_per_minute is not None and (not isinstance(per_key_per_minute, int)
                                               or isinstance(per_key_per_minute, bool)
                                               or per_key_per_minute < 1):
            raise ValueError("alert per_key_per_minute must be an integer >= 1 or null, got "
                             f"{per_key_per_minute!r}")
        if undelivered is not None and not isinstance(undelivered, (str, os.PathLike)):
            raise ValueError(f"alert undelivered must be a file path or null, got "
                             f"{undelivered!r}")
        self.url = url
        self.shown_url = redact_url(url)
        self.format = format
        self.pipeline = pipeline
        self.stage = stage
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self.per_key_per_minute = per_key_per_minute
        self.queue_size = queue_size
        self.drain_s = drain_s
        self.undelivered = (None if undelivered is None else
                            Path(str(undelivered).replace("{stage}", stage or "stage")))
        self.metrics = metrics
        self.alarms = 0  # handed to the sink; always the sum of the counts once closed
        self.counts = {"sent": 0, "failed": 0, "dropped": 0, "suppressed": 0}
        self.undelivered_written = 0
        self.last_error: str | None = None
        self._queue: deque[dict] = deque()
        self._lock = threading.Condition()
        self._file_lock = threading.Lock()
        self._recent: dict[str, deque[float]] = {}
        self._closing = False
        self._deadline: float | None = None  # monotonic end of the drain
        self._abandon = False  # the drain ended: stop, whatever is left is dropped
        self._inflight: dict | None = None  # the alarm the thread is delivering
        self._sock: socket.socket | None = None  # its connection, shut at the drain's end
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
            self.alarms += 1
            if not self._allowed(key_text(r.get("key")), now):
                self._count("suppressed")
                continue
            with self._lock:
                late = self._closing and self._abandon
                if not late and len(self._queue) >= self.queue_size:
                    old = self._queue.popleft()
                else:
                    old = None
                if not late:
                    self._queue.append(dict(r))
                    self._lock.notify()
            if late:
                self._give_up(dict(r), "dropped", "the sink was closed")
            if old is not None:
                self._give_up(old, "dropped", f"the queue was full (queue_size="
                                              f"{self.queue_size})")
        if self._thread is None:
            self.open()

    def close(self, wait_s: float | None = None) -> None:
        """Deliver what is queued for at most ``wait_s`` seconds (default ``drain_s``),
        honouring the backoff; then stop, counting what is left (queued or in flight) as
        ``dropped`` and writing it to the ``undelivered`` file."""
        wait = self.drain_s if wait_s is None else wait_s
        with self._lock:
            if self._abandon:
                return
            self._closing = True
            self._deadline = time.monotonic() + wait
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=wait)
        with self._lock:
            self._abandon = True
            self._lock.notify_all()
            sock = self._sock
        if sock is not None:  # cut the request in flight; the thread counts it
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        with self._lock:
            left = list(self._queue)
            self._queue.clear()
            if self._inflight is not None:  # the thread is stuck (e.g. in name resolution)
                left.insert(0, self._inflight)
                self._inflight = None
        for alarm in left:
            self._give_up(alarm, "dropped", f"still undelivered when the drain ended "
                                            f"(drain_s={wait:g})")
        if self.undelivered_written:
            log.warning("alerts: %d undelivered alarm(s) written to %s (re-send with: "
                        "shiftwatch resend-alerts %s --alert-url URL)",
                        self.undelivered_written, self.undelivered, self.undelivered)

    def summary(self) -> dict:
        out: dict[str, Any] = {"url": self.shown_url, "alarms": self.alarms, **self.counts}
        if self.last_error:
            out["last_error"] = self.last_error
        if self.undelivered_written:
            out["undelivered"] = str(self.undelivered)
        return out

    def line(self) -> str:
        """One line for a run's summary: every alarm's outcome, summing to the alarms."""
        c = self.counts
        out = (f"alerts: {self.alarms} alarm{'' if self.alarms == 1 else 's'}: {c['sent']} "
               f"sent to {self.shown_url}, {c['failed']} failed, {c['suppressed']} over the "
               f"per-key limit, {c['dropped']} dropped")
        if self.last_error:
            out += f" (last error: {self.last_error})"
        if self.undelivered_written:
            out += f"; undelivered -> {self.undelivered}"
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
        with self._file_lock:
            self.counts[outcome] += 1
        if self.metrics is not None:
            try:
                self.metrics.alert(outcome)
            except Exception:  # a metric must never cost an alarm
                pass

    def _body(self, alarm: Mapping) -> bytes:
        if "_body" in alarm:  # re-sent from an undelivered file: the exact body
            return json.dumps(alarm["_body"], allow_nan=False).encode()
        return json.dumps(self.payload(alarm), allow_nan=False).encode()

    def _give_up(self, alarm: Mapping, outcome: str, reason: str) -> None:
        """Count an alarm ``failed`` or ``dropped`` and keep its body where it can be
        re-sent."""
        self._count(outcome)
        try:
            body = json.loads(self._body(alarm))
        except (TypeError, ValueError) as exc:  # cannot happen for a stage's outputs
            body = {"unencodable": f"{type(exc).__name__}: {exc}"}
        line = json.dumps({"outcome": outcome, "reason": reason, "at": time.time(),
                           "url": self.shown_url, "body": body}, allow_nan=False)
        if self.undelivered is not None:
            try:
                with self._file_lock:
                    self.undelivered.parent.mkdir(parents=True, exist_ok=True)
                    with open(self.undelivered, "a", encoding="utf-8") as f:
                        f.write(line + "\n")
                        f.flush()
                    self.undelivered_written += 1
                return
            except OSError as exc:
                log.error("alerts: cannot write %s (%s); the alarm follows", self.undelivered,
                          exc)
        log.error("alert undelivered (%s: %s): %s", outcome, reason, line)

    def _deliver_loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._lock.wait(timeout=1.0)
                if not self._queue or self._abandon:
                    return
                alarm = self._queue.popleft()
                self._inflight = alarm
            self._deliver(alarm)

    def _wait(self, seconds: float) -> bool:
        """Back off ``seconds`` (within the drain's deadline); False when the drain ended."""
        with self._lock:
            end = time.monotonic() + seconds
            while not self._abandon:
                now = time.monotonic()
                stop = end if self._deadline is None else min(end, self._deadline)
                if now >= stop:
                    break
                self._lock.wait(timeout=stop - now)
            return not self._abandon and (self._deadline is None
                                          or time.monotonic() < self._deadline)

    def _finish(self, alarm: dict) -> bool:
        """Take the in-flight alarm back; False when close() already counted it."""
        with self._lock:
            if self._inflight is not alarm:
                return False
            self._inflight = None
            return True

    def _deliver(self, alarm: dict) -> None:
        body = self._body(alarm)
        wait = self.backoff_s
        attempt = 0
        for attempt in range(self.retries + 1):
            retry, error, after = self._post(body)
            if error is None:
                if self._finish(alarm):
                    self._count("sent")
                return
            self.last_error = error
            if not retry or attempt == self.retries:
                break
            if not self._wait(min(after if after is not None else wait, self.max_backoff_s)):
                if self._finish(alarm):
                    self._give_up(alarm, "dropped", f"still undelivered when the drain "
                                                    f"ended (last error: {error})")
                return
            wait = min(2 * wait, self.max_backoff_s)
        if not self._finish(alarm):
            return
        if self._abandon:
            self._give_up(alarm, "dropped", f"in flight when the drain ended ({error})")
            return
        self._give_up(alarm, "failed", f"{error} after {attempt + 1} attempt(s)")
        log.warning("alert to %s failed after %d attempt(s): %s", self.shown_url,
                    attempt + 1, error)

    def _post(self, body: bytes) -> tuple[bool, str | None, float | None]:
        """(retry?, error or None, Retry-After seconds or None) of one POST, redirects to the
        same origin by 307/308 included, within ``timeout_s`` in all."""
        deadline = time.monotonic() + self.timeout_s
        url = self.url
        start = urllib.parse.urlsplit(url)
        for _hop in range(MAX_REDIRECTS + 1):
            status, location, after, error = self._request(url, body, deadline)
            if error is not None:
                return True, error, None
            if 200 <= status < 300:
                return False, None, None
            if 300 <= status < 400:
                target = urllib.parse.urljoin(url, location or "")
                same = (location and status in (307, 308)
                        and _origin(urllib.parse.urlsplit(target)) == _origin(start))
                if not same:
                    return False, (f"HTTP {status} redirect to {redact_url(target)} not "
                                   f"followed (a redirect is not a delivery; only a 307/308 "
                                   f"to the same origin is)"), None
                url = target
                continue
            return status >= 500 or status in (408, 429), f"HTTP {status}", after
        return False, f"more than {MAX_REDIRECTS} redirects", None

    def _request(self, url: str, body: bytes, deadline: float
                 ) -> tuple[int, str | None, float | None, str | None]:
        """(status, Location, Retry-After, error) of one request, cut at ``deadline``."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return 0, None, None, f"timeout: no answer within timeout_s={self.timeout_s:g} s"
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        proxy = None
        if not urllib.request.proxy_bypass(host):
            proxy = urllib.request.getproxies().get(parts.scheme)
        try:
            if proxy:
                p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
                if parts.scheme == "https":
                    conn = http.client.HTTPSConnection(
                        p.hostname, p.port or 8080, timeout=remaining,
                        context=ssl.create_default_context())
                    conn.set_tunnel(host, port or 443)
                else:
                    conn = http.client.HTTPConnection(p.hostname, p.port or 8080,
                                                      timeout=remaining)
                    path = url
            elif parts.scheme == "https":
                conn = http.client.HTTPSConnection(host, port, timeout=remaining,
                                                   context=ssl.create_default_context())
            else:
                conn = http.client.HTTPConnection(host, port, timeout=remaining)
        except (ValueError, http.client.HTTPException) as exc:
            return 0, None, None, f"{type(exc).__name__}: {exc}"
        timer: threading.Timer | None = None
        fired = threading.Event()
        try:
            conn.connect()
            with self._lock:
                self._sock = conn.sock
                if self._abandon:
                    raise OSError("the drain ended")

            def cut() -> None:
                fired.set()
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except (OSError, AttributeError):
                    pass

            timer = threading.Timer(max(0.0, deadline - time.monotonic()), cut)
            timer.daemon = True
            timer.start()
            conn.request("POST", path, body=body,
                         headers={"Content-Type": "application/json",
                                  "User-Agent": "shiftwatch", "Connection": "close"})
            resp = conn.getresponse()
            resp.read(1024)
            after = _retry_after(resp.getheader("Retry-After"))
            return resp.status, resp.getheader("Location"), after, None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if fired.is_set() or time.monotonic() >= deadline or isinstance(exc, TimeoutError):
                return 0, None, None, (f"timeout: no complete answer within timeout_s="
                                       f"{self.timeout_s:g} s")
            if self._abandon:
                return 0, None, None, "cut when the drain ended"
            return 0, None, None, f"{type(exc).__name__}: {exc}"
        finally:
            if timer is not None:
                timer.cancel()
            with self._lock:
                self._sock = None
            conn.close()


def _retry_after(value: str | None) -> float | None:
    """Seconds of a ``Retry-After`` header given in seconds (an HTTP date is ignored)."""
    if not value:
        return None
    try:
        s = float(value.strip())
    except ValueError:
        return None
    return s if 0 <= s < math.inf else None


def resend(path: str | os.PathLike, url: str, **settings: Any) -> dict:
    """POST again every body of an ``undelivered`` file; the file then holds only the alarms
    still undelivered (replaced atomically; removed when none is left).

    Returns ``{"alarms", "sent", "left"}``.
    """
    from shiftwatch.sinks.atomic_file import AtomicFile

    path = Path(path)
    entries = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}: line {n} is not JSON ({exc})") from None
            if not isinstance(e, dict) or not isinstance(e.get("body"), dict):
                raise ValueError(f"{path}: line {n} has no body (is this an undelivered "
                                 f"alerts file?)")
            entries.append(e)
    left_path = path.with_name(path.name + ".left")
    left_path.unlink(missing_ok=True)
    settings = {**settings, "per_key_per_minute": None, "undelivered": left_path,
                "queue_size": max(1, len(entries))}
    sink = WebhookAlertSink(url, **settings)
    sink.open()
    sink.write([{"alarm": True, "key": None, "_body": e["body"]} for e in entries])
    sink.close()
    left = left_path.read_text(encoding="utf-8") if left_path.exists() else ""
    left_path.unlink(missing_ok=True)
    if left:
        with AtomicFile(path) as f:
            f.write(left)
    else:
        path.unlink()
    return {"alarms": len(entries), "sent": sink.counts["sent"],
            "left": len(left.splitlines())}
