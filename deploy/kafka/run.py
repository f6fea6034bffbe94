"""Running a pipeline's Kafka stages: one thread per stage, signals, the metrics server.

``shiftwatch run pipeline.yaml`` calls :func:`run_pipeline`: each chosen stage becomes a
:class:`~shiftwatch.deploy.kafka.stage.StageRunner` in its own thread; SIGTERM or SIGINT
makes every stage checkpoint, commit and leave its group; a stage that fails stops the
others. With ``metrics.port`` set, one server serves ``/metrics``, ``/healthz`` and
``/readyz`` for all of them (:mod:`shiftwatch.deploy.observability`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Iterable
from functools import partial

from shiftwatch.deploy.errors import UserError
from shiftwatch.deploy.kafka.stage import StageRunner
from shiftwatch.deploy.pipeline import PipelineConfig, PipelineError, StageConfig

__all__ = ["run_pipeline"]

log = logging.getLogger("shiftwatch.kafka")


def run_pipeline(config: PipelineConfig, stages: list[str] | None = None,
                 idle_exit_s: float | None = None, install_signals: bool = True,
                 reset_state: Iterable[int] | str | None = None) -> int:
    """Run the named stages (default: all) of ``config``, one thread each, until SIGTERM/SIGINT.

    Returns 0 after a clean stop, 1 if a stage failed (the others are then stopped too) or
    stopped with its input incomplete (``idle_exit_s``: partitions of the input still behind
    after the wait of :mod:`~shiftwatch.deploy.kafka.coverage`; a final checkpoint that
    failed);
    raises the :class:`~shiftwatch.deploy.errors.UserError` a stage stopped on (a pipeline
    problem, a changelog it cannot restore: one line for the command line).
    ``reset_state``: see :class:`StageRunner`.
    With ``metrics.port`` set, serves ``/metrics``, ``/healthz`` and ``/readyz`` on it
    (:mod:`shiftwatch.deploy.observability`) while the stages run.
    """
    chosen = [config.stage(s) for s in stages] if stages else list(config.stages)
    stop = threading.Event()
    previous = {}
    if install_signals and threading.current_thread() is threading.main_thread():
        def handler(signum, frame):
            log.info("signal %s: checkpointing and leaving the group", signum)
            stop.set()
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, handler)
    try:
        server = _metrics_server(config)
        try:
            return _run_stages(config, chosen, stop, idle_exit_s, server, reset_state)
        finally:
            if server is not None:
                server.close()
    finally:  # a caller that goes on (a test, the demo) gets its own handlers back
        for sig, old in previous.items():
            signal.signal(sig, old)


def _metrics_server(config: PipelineConfig):
    port = config.metrics.get("port")
    if port is None:
        return None
    from shiftwatch.deploy.observability import MetricsServer

    try:
        return MetricsServer(port=port, address=config.metrics.get("address", "0.0.0.0")).start()
    except OSError as exc:
        raise PipelineError(f"{config.source}: metrics.port {port}: cannot listen "
                            f"({exc.strerror or exc}); choose another port") from None


def _run_stages(config: PipelineConfig, chosen: list[StageConfig], stop: threading.Event,
                idle_exit_s: float | None, server, reset_state=None) -> int:
    runners = []
    for s in chosen:
        metrics = None
        if server is not None:
            max_poll_s = s.consumer["max_poll_interval_ms"] / 1000
            metrics = server.stage(
                config.name, s.name, liveness_seconds=max_poll_s + s.batch["timeout_ms"] / 1000,
                stalls_before_unhealthy=config.metrics.get("stalls_before_unhealthy", 3),
                slow_batch_seconds=0.5 * max_poll_s,
                max_key_series=config.metrics.get("max_key_series", 100))
        runners.append(StageRunner(config, s, stop=stop, idle_exit_s=idle_exit_s,
                                   metrics=metrics, reset_state=reset_state))
    for r in runners:  # topics are checked before any stage consumes
        r.prepare()
    errors: list[BaseException] = []
    #: stage name -> when its thread ended (monotonic); absent while it runs
    ended: dict[str, float] = {}
    for r in runners:  # a chained stage is not idle while a stage feeding it here still runs
        feeders = [u.stage.name for u in runners if u is not r and u.stage.output == r.stage.input]
        if feeders:
            r.upstream_active = partial(_last_active, feeders, ended)

    def target(r: StageRunner) -> None:
        try:
            r.run()
        except BaseException as exc:
            errors.append(exc)
            log.error("stage %s failed: %s: %s", r.stage.name, type(exc).__name__, exc)
            stop.set()
        finally:
            ended[r.stage.name] = time.monotonic()

    threads = [threading.Thread(target=target, args=(r,), name=f"stage-{r.stage.name}")
               for r in runners]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=0.2)
    user = [e for e in errors if isinstance(e, UserError)]
    if user:
        raise user[0]
    incomplete = [r.incomplete for r in runners if r.incomplete]
    for why in incomplete:  # (each stage logged it as it stopped; the last lines say it)
        log.error("%s", why)
    return 1 if errors or incomplete else 0


def _last_active(names: list[str], ended: dict[str, float]) -> float:
    """When the latest of the stages ``names`` was last running: now while one runs."""
    now = time.monotonic()
    return max(ended.get(n, now) for n in names)
