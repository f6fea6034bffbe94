"""The cluster goes away under a running stage; the local broker restarts on its port.

Each test starts its own private tansu (not the session's broker), so it can kill it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from kafka import KafkaAdminClient
from kafka_helpers import ROOT

from shiftwatch.deploy.kafka.broker import free_port, start_broker, stop_broker

TCP_TIME_WAIT = "06"  # the state column of /proc/net/tcp


def _time_wait_on(port: int) -> int:
    """Sockets in TIME-WAIT whose local or remote port is ``port``."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == TCP_TIME_WAIT and port in (int(local.rsplit(":", 1)[1], 16),
                                                   int(remote.rsplit(":", 1)[1], 16)):
                n += 1
    return n


def test_broker_restarts_on_its_port_at_once_after_kill_9(tmp_path):
    port = free_port()
    proc, bootstrap = start_broker(port=port)
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.list_topics()  # a client connected to it when it dies
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        admin.close()
    finally:
        stop_broker(proc, grace_s=0)
    assert _time_wait_on(port) > 0  # what made the restart fail: only TIME-WAIT is left
    again = subprocess.Popen([sys.executable, "-m", "shiftwatch.deploy.cli", "broker", "--port",
                              str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        first = again.stdout.readline()
        assert f"listening on 127.0.0.1:{port}" in first, first + again.stdout.read()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        assert admin.list_topics() == []  # a fresh broker (in memory) answers
        admin.close()
    finally:
        again.send_signal(signal.SIGTERM)
        try:
            again.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            again.kill()
            again.communicate()
