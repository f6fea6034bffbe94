"""The webhook's delivery contract against real local servers (sinks/alerts.py): a redirect is
not a delivery, the close drains within a bound honouring the backoff, ``timeout_s`` bounds the
whole request (an endpoint that hangs, drips or never accepts), the counts always sum to the
alarms, what was not delivered is kept in a file ``shiftwatch resend-alerts`` re-sends, and the
URL's secret never shows."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from shiftwatch.deploy.cli import main
from shiftwatch.deploy.pipeline import PipelineError, parse_pipeline
from shiftwatch.sinks.alerts import WebhookAlertSink, redact_url

SECRET = "T0SECRET/B0SECRET/xoxbSECRETtoken"


class Server:
    """A local HTTP server; ``answer(handler) -> (status, headers)`` decides each answer."""

    def __init__(self, answer=None):
        self.answer = answer or (lambda h: (200, {}))
        self.posts: list[tuple[str, str, bytes, int]] = []  # (method, path, body, status)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self):
                n = int(self.headers.get("Content-Length", 0) or 0)
                body = self.rfile.read(n) if n else b""
                status, headers = outer.answer(self)
                outer.posts.append((self.command, self.path, body, status))
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:
                    pass

            do_POST = do_GET = _any  # noqa: N815 (http.server's names)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def bodies(self, path=None):
        """The alarm bodies this server accepted (answered 2xx)."""
        return [json.loads(b) for m, p, b, st in self.posts
                if m == "POST" and b and 200 <= st < 300 and (path is None or p == path)]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class RawServer:
    """A TCP server that reads the request and then ``behave(conn)``: hangs, drips..."""

    def __init__(self, behave):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/{SECRET}"
        self.conns: list[socket.socket] = []
        self.stop = threading.Event()

        def serve():
            while not self.stop.is_set():
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                self.conns.append(conn)
                threading.Thread(target=behave, args=(conn, self.stop), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()

    def close(self):
        self.stop.set()
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture
def servers():
    made = []

    def make(kind, arg=None):
        s = kind(arg)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def alarm(i=0, key="pump-a"):
    return {"key": key, "offset": i, "ts": 1_767_225_600.0 + i, "alarm": True,
            "statistic": 7.5, "threshold": 6.0, "change_at": 3000}


def alarms(n, keys=1):
    return [alarm(i, f"k{i % keys}") for i in range(n)]


def sums(sink):
    return sum(sink.counts.values()) == sink.alarms


def undelivered(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ---- redirects -------------------------------------------------------------------------

def test_a_redirect_to_another_origin_is_failed_and_not_followed(servers, tmp_path):
    other = servers(Server)
    hook = servers(Server, lambda h: (302, {"Location": f"{other.base}/elsewhere"}))
    sink = WebhookAlertSink(f"{hook.base}/{SECRET}", retries=3, backoff_s=0.01,
                            per_key_per_minute=None, undelivered=tmp_path / "u.jsonl")
    sink.open()
    sink.write(alarms(20))
    sink.close()
    assert other.posts == []  # nothing went to the other host, not even a GET
    assert len(hook.posts) == 20  # a redirect is not retried
    assert sink.counts == {"sent": 0, "failed": 20, "dropped": 0, "suppressed": 0}
    assert "HTTP 302 redirect" in sink.last_error and "not followed" in sink.last_error
    assert "elsewhere" not in sink.last_error  # the target is redacted too
    kept = undelivered(tmp_path / "u.jsonl")
    assert len(kept) == 20 and {e["outcome"] for e in kept} == {"failed"}
    assert [e["body"]["alarm"]["offset"] for e in kept] == list(range(20))


@pytest.mark.parametrize("status", [301, 302, 303])
def test_a_redirect_that_would_drop_the_body_is_failed_even_to_the_same_origin(servers,
                                                                            status):
    hook = servers(Server, lambda h: ((status, {"Location": "/moved"}) if h.path == "/hook"
                                      else (200, {})))
    sink = WebhookAlertSink(f"{hook.base}/hook", retries=2, backoff_s=0.01)
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert [p for _, p, _, _ in hook.posts] == ["/hook"]
    assert sink.counts["failed"] == 1 and sink.counts["sent"] == 0


@pytest.mark.parametrize("status", [307, 308])
def test_a_307_or_308_to_the_same_origin_posts_the_body_again(servers, status):
    hook = servers(Server, lambda h: ((status, {"Location": "/v2/hook"}) if h.path == "/hook"
                                      else (200, {})))
    sink = WebhookAlertSink(f"{hook.base}/hook")
    sink.open()
    sink.write([alarm(7)])
    sink.close()
    assert sink.counts["sent"] == 1
    (body,) = hook.bodies("/v2/hook")
    assert body["alarm"]["offset"] == 7 and hook.posts[-1][0] == "POST"


def test_a_307_to_another_port_is_not_followed(servers):
    other = servers(Server)
    hook = servers(Server, lambda h: (307, {"Location": f"{other.base}/hook"}))
    sink = WebhookAlertSink(f"{hook.base}/hook", retries=1, backoff_s=0.01)
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert other.posts == [] and sink.counts["failed"] == 1


def test_a_redirect_loop_on_the_same_origin_ends(servers):
    hook = servers(Server, lambda h: (307, {"Location": h.path + "x"}))
    sink = WebhookAlertSink(f"{hook.base}/hook", retries=0)
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert sink.counts["failed"] == 1 and "redirects" in sink.last_error
    assert len(hook.posts) == 4  # the first and three hops


# ---- the drain at close ----------------------------------------------------------------

def test_an_endpoint_that_recovers_during_the_drain_gets_every_alarm(servers, tmp_path):
    """500 for 1.5 s, then 200: close() waits, honouring the backoff, and delivers all."""
    t0 = time.monotonic()
    hook = servers(Server, lambda h: (500 if time.monotonic() - t0 < 1.5 else 200, {}))
    sink = WebhookAlertSink(f"{hook.base}/hook", retries=5, backoff_s=0.2,
                            per_key_per_minute=None, undelivered=tmp_path / "u.jsonl")
    sink.open()
    sink.write(alarms(20))
    sink.close()  # at once, as at the end of a replay
    assert sink.counts == {"sent": 20, "failed": 0, "dropped": 0, "suppressed": 0}
    assert sorted(b["alarm"]["offset"] for b in hook.bodies()) == list(range(20))
    attempts = len(hook.posts)
    assert attempts < 20 + 6  # backed off: not 80 attempts in a fraction of a second
    assert not (tmp_path / "u.jsonl").exists()


def test_the_drain_is_bounded_and_what_is_left_is_counted_and_kept(servers, tmp_path):
    hook = servers(Server, lambda h: (503, {}))
    path = tmp_path / "u.jsonl"
    sink = WebhookAlertSink(f"{hook.base}/hook", retries=50, backoff_s=0.1,
                            max_backoff_s=0.2, drain_s=1.0, per_key_per_minute=None,
                            undelivered=path)
    sink.open()
    sink.write(alarms(5))
    t0 = time.monotonic()
    sink.close()
    assert time.monotonic() - t0 < 4.0
    assert sink.counts["dropped"] == 5 and sums(sink)
    kept = undelivered(path)
    assert [e["body"]["alarm"]["offset"] for e in kept] == list(range(5))
    assert all("drain" in e["reason"] for e in kept)
    assert all(e["url"] == f"{hook.base}/…" for e in kept)


def test_the_alarm_in_flight_at_the_drain_deadline_is_counted(servers, tmp_path):
    """An endpoint that accepts and never answers, a long timeout_s and a short drain: the
    alarm in flight and the queued ones are all dropped, none is in no counter."""
    hang = servers(RawServer, lambda conn, stop: stop.wait())
    path = tmp_path / "u.jsonl"
    sink = WebhookAlertSink(hang.url, timeout_s=60, drain_s=1.0, per_key_per_minute=None,
                            undelivered=path)
    sink.open()
    sink.write(alarms(20))
    time.sleep(0.3)
    t0 = time.monotonic()
    sink.close()
    assert time.monotonic() - t0 < 4.0
    assert sink.counts == {"sent": 0, "failed": 0, "dropped": 20, "suppressed": 0}
    assert sorted(e["body"]["alarm"]["offset"] for e in undelivered(path)) == list(range(20))


# ---- timeout_s is a deadline for the whole request ---------------------------------------

def _drip(conn, stop):
    conn.recv(65536)
    for ch in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
        if stop.wait(0.2):
            return
        try:
            conn.send(bytes([ch]))
        except OSError:
            return


@pytest.mark.parametrize("behave", [lambda conn, stop: stop.wait(), _drip],
                         ids=["hang", "drip"])
def test_an_endpoint_that_hangs_or_drips_costs_at_most_timeout_s(servers, tmp_path, behave):
    srv = servers(RawServer, behave)
    sink = WebhookAlertSink(srv.url, retries=0, timeout_s=0.8, per_key_per_minute=None,
                            undelivered=tmp_path / "u.jsonl")
    sink.open()
    t0 = time.monotonic()
    sink.write(alarms(3))
    sink.close()
    took = time.monotonic() - t0
    assert sink.counts == {"sent": 0, "failed": 3, "dropped": 0, "suppressed": 0}
    assert "timeout" in sink.last_error and "timeout_s=0.8" in sink.last_error
    assert 3 * 0.8 - 0.1 < took < 3 * 0.8 + 2.0


def test_an_endpoint_that_never_accepts_costs_at_most_timeout_s():
    """A listening socket whose accept queue is full: the connect itself hangs."""
    with socket.socket() as lsock:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(0)
        port = lsock.getsockname()[1]
        fillers = []
        for _ in range(8):  # fill the accept queue (never accepted)
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        time.sleep(0.1)
        try:
            probe = socket.create_connection(("127.0.0.1", port), timeout=0.3)
            probe.close()
            pytest.skip("this kernel accepts the handshake beyond the backlog")
        except OSError:
            pass
        sink = WebhookAlertSink(f"http://127.0.0.1:{port}/hook", retries=0, timeout_s=0.6)
        sink.open()
        t0 = time.monotonic()
        sink.write([alarm()])
        sink.close()
        took = time.monotonic() - t0
        for s in fillers:
            s.close()
    assert sink.counts["failed"] == 1 and "timeout" in sink.last_error
    assert took < 0.6 + 1.5


def test_retry_after_is_honoured(servers):
    stamps = []

    def answer(h):
        stamps.append(time.monotonic())
        return (429, {"Retry-After": "1"}) if len(stamps) == 1 else (200, {})

    hook = servers(Server, answer)
    sink = WebhookAlertSink(f"{hook.base}/hook", backoff_s=0.01)
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert sink.counts["sent"] == 1 and stamps[1] - stamps[0] >= 0.95


def test_the_proxy_of_the_environment_is_used(servers, monkeypatch):
    proxy = servers(Server)
    monkeypatch.setenv("http_proxy", proxy.base)
    monkeypatch.setenv("no_proxy", "")
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    sink = WebhookAlertSink("http://alerts.shiftwatch.invalid/hook")
    sink.open()
    sink.write([alarm()])
    sink.close()
    assert sink.counts["sent"] == 1
    assert proxy.posts[0][1] == "http://alerts.shiftwatch.invalid/hook"


# ---- counts always sum --------------------------------------------------------------------

def test_every_alarm_has_exactly_one_outcome(servers, tmp_path):
    n = [0]

    def answer(h):
        n[0] += 1
        return (500 if n[0] % 3 == 0 else 200, {})

    hook = servers(Server, answer)
    sink = WebhookAlertSink(f"{hook.base}/hook", retries=0, per_key_per_minute=5,
                            queue_size=10, undelivered=tmp_path / "u.jsonl")
    sink.open()
    for i in range(12):  # 3 keys x 20 alarms, written fast: suppressed, dropped, failed, sent
        sink.write([alarm(100 * i + j, f"k{j % 3}") for j in range(5)])
    sink.close()
    c = sink.counts
    assert sink.alarms == 60 and sums(sink)
    assert c["suppressed"] == 60 - 15 and c["sent"] >= 1
    assert len(undelivered(tmp_path / "u.jsonl")) == c["failed"] + c["dropped"]
    assert len(hook.bodies()) == c["sent"]


# ---- re-sending ---------------------------------------------------------------------------

def test_resend_alerts_posts_the_exact_bodies_and_keeps_what_still_fails(servers, tmp_path,
                                                                       capsys):
    path = tmp_path / "u.jsonl"
    down = servers(Server, lambda h: (500, {}))
    sink = WebhookAlertSink(f"{down.base}/hook", retries=0, per_key_per_minute=None,
                            undelivered=path, pipeline="p", stage="detect")
    sink.open()
    sink.write(alarms(4))
    sink.close()
    assert len(undelivered(path)) == 4
    first = [e["body"] for e in undelivered(path)]

    rc = main(["resend-alerts", str(path), "--alert-url", f"{down.base}/{SECRET}",
               "--alert-opt", "retries=0"])
    out = capsys.readouterr().out
    assert rc == 1 and "4 still undelivered" in out and SECRET not in out
    assert [e["body"] for e in undelivered(path)] == first

    up = servers(Server)
    rc = main(["resend-alerts", str(path), "--alert-url", f"{up.base}/hook"])
    assert rc == 0 and "resent 4 of 4" in capsys.readouterr().out
    assert up.bodies() == first and not path.exists()


def test_resend_alerts_refuses_a_file_that_is_not_one(tmp_path, capsys):
    bad = tmp_path / "x.jsonl"
    bad.write_text('{"a": 1}\n')
    assert main(["resend-alerts", str(bad), "--alert-url", "http://127.0.0.1:1/"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 1 has no body" in err[0]
    assert main(["resend-alerts", str(tmp_path / "none"), "--alert-url",
                 "http://127.0.0.1:1/"]) == 2


# ---- the URL is a secret -------------------------------------------------------------------

def test_redact_url_keeps_only_scheme_host_and_port():
    assert redact_url(f"https://hooks.slack.com/services/{SECRET}") == "https://hooks.slack.com/…"
    assert redact_url("http://u:pw0SECRET@h:81/") == "http://h:81/…"  # userinfo dropped
    assert SECRET not in redact_url(f"http://u:{SECRET}@h:81/")  # a '/' in it: unparseable
    assert redact_url(f"http://h/?token={SECRET}") == "http://h/…"
    assert redact_url("http://[::1]:8080/x") == "http://[::1]:8080/…"
    assert SECRET not in redact_url(f"http://h:notaport/{SECRET}")


def test_the_secret_of_the_url_is_never_shown(servers, tmp_path, capsys, caplog):
    """A replay whose webhook fails (500) and one whose webhook redirects: stdout, stderr, the
    log, every file of the output folder and the pipeline's refusals never hold the path."""
    src = tmp_path / "s.csv"
    src.write_text("key,value\n" + "".join(f"k,{0.0 if i < 300 else 5.0}\n"
                                           for i in range(600)))
    down = servers(Server, lambda h: (500, {}))
    moved = servers(Server, lambda h: (302, {"Location": f"{down.base}/{SECRET}/next"}))
    caplog.set_level(logging.DEBUG)
    for srv, name in ((down, "a"), (moved, "b")):
        out = tmp_path / name
        rc = main(["replay", str(src), "--source-opt", "key=key", "--operator", "river:ADWIN",
                   "--alert-url", f"{srv.base}/services/{SECRET}", "--alert-opt", "retries=1",
                   "--alert-opt", "backoff_s=0.01", "--out", str(out), "--no-plots",
                   "--no-progress"])
        assert rc == 0
        files = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
        assert SECRET.encode() not in files
        assert (out / "alerts_undelivered.jsonl").exists()
    seen = capsys.readouterr()
    assert "alerts: " in seen.out and f"sent to {down.base}/…" in seen.out
    assert "failed" in seen.out and "undelivered ->" in seen.out
    assert SECRET not in seen.out + seen.err + caplog.text
    for bad in ({"url": f"ftp://h/{SECRET}"}, {"url": f"https://h/{SECRET}", "retries": -1},
                {"url": f"https://h/{SECRET}", "nope": 1}, {"format": "json"}):
        yaml_text = ("name: p\ntopics: {partitions: 1}\nalerts: " + json.dumps(bad)
                     + "\nstages:\n  - {name: d, input: in, output: out, "
                     "operators: [{name: 'river:ADWIN'}]}\n")
        with pytest.raises(PipelineError) as exc:
            parse_pipeline(yaml_text)
        assert SECRET not in str(exc.value)
