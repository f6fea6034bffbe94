"""The webhook alert sink against a real local HTTP server: delivered, retried after failures,
never blocking the runner when the endpoint is slow or refusing, rate-limited per key."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from shiftwatch.deploy.cli import main
from shiftwatch.sinks.alerts import WebhookAlertSink


class Endpoint:
    """A local HTTP server whose answers a test scripts: a list of (status, delay_s)."""

    def __init__(self, answers=None):
        self.answers = list(answers or [])
        self.bodies: list[dict] = []
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                n = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(n)
                outer.hits += 1
                status, delay = outer.answers.pop(0) if outer.answers else (200, 0.0)
                time.sleep(delay)
                if status == 200:
                    outer.bodies.append(json.loads(body))
                try:
                    self.send_response(status)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    made = []

    def make(answers=None):
        e = Endpoint(answers)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def alarm(key="pump-a", i=0):
    return {"key": key, "offset": i, "ts": 1_767_225_600.0 + i, "alarm": True,
            "statistic": 7.5, "threshold": 6.0, "change_at": 3000}


def test_alarms_are_posted_as_json_and_others_are_not(endpoint):
    e = endpoint()
    sink = WebhookAlertSink(e.url, pipeline="p", stage="detect")
    sink.open()
    sink.write([alarm(), {"key": "pump-a", "alarm": False}, {"key": "x"}])
    sink.close()
    assert sink.counts == {"sent": 1, "failed": 0, "dropped": 0, "suppressed": 0}
    (body,) = e.bodies
    assert body["source"] == "shiftwatch" and body["stage"] == "detect"
    assert body["alarm"]["key"] == "pump-a" and body["alarm"]["change_at"] == 3000


def test_a_failing_endpoint_is_retried_with_backoff(endpoint):
    e = endpoint([(500, 0.0), (503, 0.0), (200, 0.0)])
    sink = WebhookAlertSink(e.url, retries=3, backoff_s=0.05)
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert e.hits == 3 and sink.counts["sent"] == 1 and sink.counts["failed"] == 0


def test_a_refused_delivery_is_counted_and_a_4xx_not_retried(endpoint):
    e = endpoint([(400, 0.0)])
    sink = WebhookAlertSink(e.url, retries=3, backoff_s=0.05)
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert e.hits == 1 and sink.counts["failed"] == 1 and sink.last_error == "HTTP 400"
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sink = WebhookAlertSink(f"http://127.0.0.1:{port}/", retries=1, backoff_s=0.05)
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert sink.counts["failed"] == 1 and "refused" in sink.last_error.lower()


def test_a_slow_endpoint_never_blocks_the_runner(endpoint):
    e = endpoint([(200, 1.0)] * 5)
    sink = WebhookAlertSink(e.url, retries=0, timeout_s=0.3, per_key_per_minute=None,
                            queue_size=3)
    sink.open()
    t0 = time.monotonic()
    for i in range(10):
        sink.write([alarm(i=i)])
    assert time.monotonic() - t0 < 0.2  # write only queues
    sink.close(wait_s=1.0)
    c = sink.counts
    assert c["failed"] >= 1 and c["dropped"] >= 1  # timed out; the queue overflowed
    assert c["sent"] + c["failed"] + c["dropped"] == 10


def test_a_flapping_key_is_rate_limited(endpoint):
    e = endpoint()
    sink = WebhookAlertSink(e.url, per_key_per_minute=2)
    sink.open()
    sink.write([alarm("a", i) for i in range(5)] + [alarm("b", 9)])
    sink.close()
    assert sink.counts["sent"] == 3 and sink.counts["suppressed"] == 3
    assert sorted(b["alarm"]["key"] for b in e.bodies) == ["a", "a", "b"]


def test_slack_text_names_the_key_time_statistic_and_change(endpoint):
    e = endpoint()
    sink = WebhookAlertSink(e.url, format="slack", pipeline="sensors", stage="detect")
    sink.open()
    sink.write([alarm()])
    sink.close()
    (body,) = e.bodies
    assert body == {"text": "shiftwatch sensors/detect: alarm on key pump-a, at "
                            "2026-01-01T00:00:00Z, statistic 7.5 > threshold 6, change "
                            "located at position 3000"}


@pytest.mark.parametrize("kwargs", [{"url": "ftp://x"}, {"format": "xml"},
                                    {"retries": -1}, {"per_key_per_minute": 0},
                                    {"timeout_s": 0}])
def test_bad_settings_are_one_clear_error(kwargs):
    with pytest.raises(ValueError, match="alert"):
        WebhookAlertSink(**{"url": "http://127.0.0.1:1/", **kwargs})


def test_replay_posts_its_alarms_and_its_outputs_do_not_depend_on_the_endpoint(endpoint,
                                                                             tmp_path, capsys):
    src = tmp_path / "s.csv"
    src.write_text("key,value\n" + "".join(f"k,{0.0 if i < 300 else 5.0}\n"
                                           for i in range(600)))
    good, down = endpoint(), endpoint([(500, 0.0)] * 100)
    outs = []
    for e, name in ((good, "a"), (down, "b")):
        out = tmp_path / name
        rc = main(["replay", str(src), "--source-opt", "key=key", "--operator", "river:ADWIN",
                   "--alert-url", e.url, "--alert-opt", "retries=1", "--alert-opt",
                   "backoff_s=0.01", "--out", str(out), "--no-plots", "--no-progress",
                   "--quiet"])
        assert rc == 0
        outs.append((out / "outputs.jsonl").read_bytes())
    stdout = capsys.readouterr().out
    assert outs[0] == outs[1]  # a failing endpoint costs no output
    assert good.bodies and all(b["alarm"]["alarm"] for b in good.bodies)
    assert "alerts:" in stdout and "failed" in stdout
