"""The ``shiftwatch`` command line.

Errors a user can make (bad parameter, unknown operator, missing file) end the command with
one line on stderr and exit status 2; ``--debug`` shows the traceback instead. Only errors
raised on purpose about the user's input count: a ``ValueError`` raised while parameters,
sources, labels and pipeline files are checked becomes a :class:`UserError`; one raised later
(a bug) prints its traceback and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from shiftwatch.deploy.catalog import cmd_operators, cmd_sources
from shiftwatch.deploy.cli_args import build_operators as _build_operators
from shiftwatch.deploy.cli_args import load_labels, parse_params
from shiftwatch.deploy.console import print_failed, print_scores
from shiftwatch.deploy.errors import UserError, user_input
from shiftwatch.deploy.key_alarms import parse_max_key_series

__all__ = ["main", "parse_params", "load_labels"]

EXIT_USAGE = 2


class _OperatorAction(argparse.Action):
    """``--operator NAME`` starts a new stage; following ``--param`` belong to it."""

    def __call__(self, parser, namespace, values, option_string=None):
        stages = getattr(namespace, "stages", None) or []
        stages.append({"name": values, "params": []})
        namespace.stages = stages


class _ParamAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        stages = getattr(namespace, "stages", None)
        if not stages:
            parser.error("--param must follow the --operator it belongs to")
        stages[-1]["params"].append(values)


# --------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------


def cmd_replay(args: argparse.Namespace) -> int:
    from shiftwatch.deploy.local import Pipeline
    from shiftwatch.sinks import ConsoleAlarmSink, DeadLetterSink, EvaluationSink, JsonlSink
    from shiftwatch.sinks.atomic_file import WriteFailed
    from shiftwatch.sinks.labels import LabelsError
    from shiftwatch.streams import open_source

    if not getattr(args, "stages", None):
        raise UserError("replay needs at least one --operator NAME (`auto` if you do not know "
                        "what will change; see `shiftwatch operators`)")
    ops = _build_operators(args.stages)  # validate before opening anything
    parquet = getattr(args, "outputs_format", "jsonl") == "parquet"
    if parquet:
        from shiftwatch.sinks.parquet import require_pyarrow

        try:
            require_pyarrow()
        except ImportError as exc:
            raise UserError(f"--outputs-format parquet: {exc}") from None
    from shiftwatch.deploy.expiry import Expiry

    with user_input():
        expiry = Expiry.from_settings({"ttl_seconds": args.key_ttl, "clock": args.key_clock,
                                       "max_keys": args.max_keys})
    from shiftwatch.deploy.time_rule import check_time

    try:
        time_rule = check_time({"allowed_lateness_seconds": args.allowed_lateness,
                                "drop_duplicates": args.drop_duplicates})
    except ValueError as exc:
        raise UserError(f"--allowed-lateness/--drop-duplicates: {exc}") from None
    from shiftwatch.deploy.bounds import BOUNDS_DEFAULTS, check_bounds

    future = BOUNDS_DEFAULTS["max_future_seconds"] if args.max_future_seconds is None else (
        None if args.max_future_seconds == "off" else _future_seconds(args.max_future_seconds))
    try:
        bounds = check_bounds({"max_abs_value": args.max_abs_value,
                               "max_future_seconds": future})
    except ValueError as exc:
        raise UserError(f"--max-abs-value/--max-future-seconds: {exc}") from None
    source_opts = parse_params(args.source_opt, "--source-opt")
    if args.source.startswith("kafka:"):  # a bounded wait for the cluster, client log quiet
        from shiftwatch.deploy.kafka.connect import client_defaults, quiet_kafka_logs

        quiet_kafka_logs(args.debug)
        source_opts["client"] = {**client_defaults(args.connect_timeout),
                                 **(source_opts.get("client") or {})}
    with user_input():
        source = open_source(args.source, **source_opts)
    annotations = getattr(source, "annotations", None)
    if args.labels:
        annotations = load_labels(args.labels, getattr(source, "name", None))
        _check_label_keys(annotations, args, source_opts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    op_label = " -> ".join(s["name"] for s in args.stages)
    with user_input():  # labels are checked here
        parameters = {"source": args.source,
                      "source options": " ".join(args.source_opt or []) or None,
                      **{f"operator {i + 1}": " ".join([s["name"], *s["params"]])
                         for i, s in enumerate(args.stages)},
                      "labels": args.labels, "speed": args.speed, "emit": args.emit,
                      "key ttl": args.key_ttl,
                      "max keys": args.max_keys,
                      "allowed lateness": args.allowed_lateness,
                      "drop duplicates": args.drop_duplicates or None,
                      "batch size": args.batch_size}
        evaluation = EvaluationSink(out, annotations=annotations,
                                    name=getattr(source, "name", args.source), operator=op_label,
                                    plots=not args.no_plots, parameters=parameters,
                                    channels=getattr(source, "columns", None), operators=ops)
    if parquet:
        from shiftwatch.sinks.parquet import ParquetSink

        outputs = ParquetSink(out / "outputs.parquet", alarms_only=args.emit == "alarms")
    else:
        outputs = JsonlSink(out / "outputs.jsonl", alarms_only=args.emit == "alarms")
    sinks = [outputs, evaluation]
    if not args.quiet:
        sinks.append(ConsoleAlarmSink(stream=sys.stdout, max_rows=args.max_rows))
    alerts = None
    if args.alert_url:
        from shiftwatch.sinks.alerts import WebhookAlertSink

        settings = {"undelivered": out / "alerts_undelivered.jsonl",
                    **parse_params(args.alert_opt, "--alert-opt")}
        with user_input():
            alerts = WebhookAlertSink(args.alert_url, stage="replay", pipeline=str(
                getattr(source, "name", args.source)), **settings)
        sinks.append(alerts)
    dead = DeadLetterSink(out / "dead_letters.jsonl")
    server = metrics = None
    if args.metrics_port is not None:
        from shiftwatch.deploy.observability import MetricsServer

        server = MetricsServer(port=args.metrics_port, address=args.metrics_host).start()
        metrics = server.stage("replay", str(getattr(source, "name", args.source)),
                               max_key_series=args.max_key_series)
        if alerts is not None:
            alerts.metrics = metrics
    stopped: WriteFailed | None = None
    try:
        summary = Pipeline(source, ops, sinks, dead_letters=dead, batch_size=args.batch_size,
                           speed=args.speed, progress=not args.no_progress,
                           metrics=metrics, expiry=expiry, time=time_rule,
                           bounds=bounds).run()
    except WriteFailed as exc:  # a file could not be written (a full disk): the run stopped
        summary, stopped = getattr(exc, "summary", None), exc
    except LabelsError as exc:  # known only at the end: the keys of the stream
        where = f"--labels {args.labels}" if args.labels else f"the annotations of {args.source}"
        raise UserError(f"{where}: {exc}") from None
    finally:
        if server is not None:
            server.close()
    if summary is not None:
        print(summary.line())
        blank = getattr(source, "blank_lines", 0)
        if blank:
            print(f"skipped {blank} blank line{'' if blank == 1 else 's'} of {args.source}")
        unread = getattr(source, "unread", None)
        if unread:  # the results are of a part of the file: say so beside them
            print(f"{args.source} was not read to its end (partial results): {unread}")
        if summary.dead_letters and dead.written:
            reasons = ", ".join(f"{n} x {r}" for r, n in sorted(
                summary.dead_letter_reasons.items(), key=lambda kv: -kv[1]))
            print(f"dead letters -> {out / 'dead_letters.jsonl'}: {reasons}")
    print_scores(getattr(evaluation, "report", None) or {})
    if alerts is not None:
        print(alerts.line())
    done = set(evaluation.written) | ({str(outputs.path)} if outputs.written else set())
    written = [str(p) for p in (Path(outputs.path), out / "report.json", out / "keys.jsonl",
                                out / "report.html") if str(p) in done]
    if any(p.endswith(".png") for p in done):
        written.append(f"{out}/*.png")
    if written:
        print("wrote " + ", ".join(written))
    failed = dict(stopped.failed) if stopped is not None else {}
    for sink in (outputs, dead):
        if sink.error is not None:
            failed[str(sink.path)] = sink.error
    failed.update(evaluation.failed)
    if print_failed(failed, stopped):
        return EXIT_USAGE
    return 130 if summary is not None and summary.interrupted else 0


def _check_label_keys(annotations: Any, args: argparse.Namespace, source_opts: dict) -> None:
    """A labels file that names keys is checked against the keys of a file source before the
    operators run (one pass over the file's keys), not after the whole replay."""
    from shiftwatch.codec import key_text
    from shiftwatch.sinks.labels import EVERY_KEY, LabelsError, plan_labels
    from shiftwatch.streams import open_source

    if not isinstance(annotations, Mapping) or set(map(str, annotations)) <= {EVERY_KEY}:
        return
    if args.source.startswith(("kafka:", "river:", "synth:")):
        return  # a topic is read once; built-in sources are checked at the end as before
    with user_input():
        keys = {key_text(r.get("key")) for r in open_source(args.source, **source_opts)
                if isinstance(r, Mapping)}
    try:
        plan_labels(annotations, keys)
    except LabelsError as exc:
        raise UserError(f"--labels {args.labels}: {exc}") from None


def cmd_run(args: argparse.Namespace) -> int:
    import logging

    from shiftwatch.deploy.kafka.run import run_pipeline
    from shiftwatch.deploy.pipeline import load_pipeline

    with user_input():
        config = load_pipeline(args.pipeline)  # every check runs before anything is consumed
    if args.bootstrap:
        config.kafka["bootstrap_servers"] = args.bootstrap
    if args.metrics_file:
        config.metrics["file"] = args.metrics_file
    if args.metrics_port is not None:
        config.metrics["port"] = args.metrics_port
    if args.metrics_host is not None:
        config.metrics["address"] = args.metrics_host
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    from shiftwatch.deploy.kafka.connect import client_defaults, quiet_kafka_logs

    quiet_kafka_logs(args.debug)
    if args.connect_timeout is not None:  # the option, then the file, then the environment
        config.kafka.update(client_defaults(args.connect_timeout))
    for k, v in client_defaults().items():  # a bounded wait for the cluster
        config.kafka.setdefault(k, v)
    args.waited_s = config.kafka["bootstrap_timeout_ms"] / 1000  # for the unreachable line
    return run_pipeline(config, stages=args.stage or None, idle_exit_s=args.exit_when_idle,
                        reset_state=_reset_state(args.reset_state))


def _reset_state(spec: str | None):
    """``--reset-state 0,2`` -> {0, 2}; ``all`` -> "all"; None -> None."""
    if spec is None:
        return None
    if spec.strip() == "all":
        return "all"
    try:
        parts = {int(p) for p in spec.split(",") if p.strip()}
    except ValueError:
        raise UserError(f"--reset-state {spec!r}: give partitions such as 0,2 or 'all'") from None
    if not parts or min(parts) < 0:
        raise UserError(f"--reset-state {spec!r}: give partitions such as 0,2 or 'all'")
    return parts


def cmd_demo(args: argparse.Namespace) -> int:
    if args.kafka:
        from shiftwatch.deploy.demos.kafka import run_kafka_demo
        from shiftwatch.deploy.kafka.connect import quiet_kafka_logs

        quiet_kafka_logs(args.debug)
        return run_kafka_demo(out_dir=Path(args.out) / "kafka")
    from shiftwatch.deploy.demos.tcpd import run_demo

    rc = run_demo(out_dir=Path(args.out), datasets=args.dataset or None,
                  detectors=args.detector or None, plots=not args.no_plots)
    if rc == 0 and not args.no_sensors:
        # The multichannel part: Riemannian detection through the window-covariance transform.
        from shiftwatch.deploy.demos.sensors import run_sensor_demo

        rc = run_sensor_demo(out_dir=Path(args.out) / "sensors", plots=not args.no_plots)
    return rc


def cmd_broker(args: argparse.Namespace) -> int:
    from shiftwatch.deploy.kafka.broker import BrokerError, run_broker

    try:
        return run_broker(port=args.port, host=args.host)
    except BrokerError as exc:
        raise UserError(str(exc)) from None


def cmd_produce(args: argparse.Namespace) -> int:
    from shiftwatch.deploy.kafka.connect import client_defaults, default_bootstrap
    from shiftwatch.deploy.kafka.connect import quiet_kafka_logs as _quiet
    from shiftwatch.deploy.kafka.produce import produce_source
    from shiftwatch.sinks import DeadLetterSink
    from shiftwatch.streams import open_source

    if args.source.startswith("kafka:"):
        raise UserError("produce reads files and data sets (.csv, .jsonl, river:NAME, "
                        "synth:NAME), not a topic")
    if args.rate is not None and not args.rate > 0:
        raise UserError(f"--rate must be records per second > 0, got {args.rate:g}")
    if args.partitions is not None and args.partitions < 1:
        raise UserError(f"--partitions must be >= 1, got {args.partitions}")
    opts = parse_params(args.source_opt, "--source-opt")
    key_field = args.key or "key"
    if args.key and args.source.partition(":")[0] not in ("river", "synth"):
        opts.setdefault("key", args.key)  # a file: --key names the column holding the key
        key_field = "key"
    with user_input():
        source = open_source(args.source, **opts)
    _quiet(args.debug)
    dead = DeadLetterSink(args.dead_letters) if args.dead_letters else None
    try:
        summary = produce_source(source, args.topic, args.bootstrap or default_bootstrap(),
                                 key_field=key_field, rate=args.rate, partitions=args.partitions,
                                 progress=not args.no_progress, dead_letters=dead,
                                 client=client_defaults(args.connect_timeout),
                                 limit=args.limit)
    finally:
        if dead is not None:
            dead.close()
    for warning in summary.warnings:
        print(f"shiftwatch: warning: {warning}", file=sys.stderr)
    print(summary.line() + (f" (created {args.topic} with {args.partitions} partitions)"
                            if summary.created else ""))
    if summary.dead_letters:
        reasons = ", ".join(f"{n} x {r}" for r, n in summary.reasons.most_common())
        where = f" -> {args.dead_letters}" if args.dead_letters else ""
        first = ", ".join(f"{k} {v}" for k, v in (summary.first_dead or {}).items())
        print(f"dead letters (not produced){where}: {reasons}"
              + (f"; first at {first}" if first else ""))
    if dead is not None and print_failed({str(dead.path): dead.error} if dead.error else {}):
        return EXIT_USAGE
    return 130 if summary.interrupted else 0


def _future_seconds(text: str) -> float:
    """``--max-future-seconds``' number, or a one-line UserError."""
    try:
        return float(text)
    except ValueError:
        raise UserError(f"--max-future-seconds must be a number of seconds or 'off', got "
                        f"{text!r}") from None


def cmd_consume(args: argparse.Namespace) -> int:
    from shiftwatch.deploy.kafka.connect import client_defaults, default_bootstrap
    from shiftwatch.deploy.kafka.connect import quiet_kafka_logs as _quiet
    from shiftwatch.deploy.kafka.consume import consume_topic

    if not args.from_beginning and not args.follow:
        raise UserError(f"consume {args.topic}: without --follow it reads up to the end the "
                        "topic has now, so from there nothing: add --from-beginning to read "
                        "what the topic holds, or --follow to wait for new messages")
    _quiet(args.debug)
    summary = consume_topic(args.topic, args.bootstrap or default_bootstrap(),
                            from_beginning=args.from_beginning, follow=args.follow,
                            alarms_only=args.alarms_only, dedupe=args.dedupe, fmt=args.format,
                            client=client_defaults(args.connect_timeout))
    print(summary.line(), file=sys.stderr)
    return 130 if summary.interrupted else 0


def _history(source: Any, spec: str) -> Iterator[Any]:
    """The items of ``source`` for ``calibrate``, which runs inside :func:`user_input`.

    A source yields a dead letter for input it cannot read; one that raises
    :class:`~shiftwatch.records.BadInput` instead stops the reading with one line
    naming the record. Any other ``ValueError`` it raises is a bug, not the user's: it is
    passed on as a ``RuntimeError`` so that :func:`user_input` does not print its bare
    message as the user's error, and ``main`` shows its traceback.
    """
    from shiftwatch.records import BadInput

    items = iter(source)
    n = 0
    while True:
        try:
            item = next(items)
        except StopIteration:
            return
        except BadInput as exc:
            raise UserError(f"{spec}: cannot read past record {n}: {exc}") from None
        except UserError:
            raise
        except ValueError as exc:
            raise RuntimeError(f"{spec}: reading record {n} failed: {type(exc).__name__}: "
                               f"{exc}") from exc
        yield item
        n += 1


def cmd_calibrate(args: argparse.Namespace) -> int:
    from shiftwatch.deploy.calibrate import calibrate
    from shiftwatch.deploy.local import stop_if_all_dead
    from shiftwatch.sinks.atomic_file import WriteFailed
    from shiftwatch.streams import open_source

    if not getattr(args, "stages", None):
        raise UserError("calibrate needs --operator NAME, a detector (see `shiftwatch operators`)")
    stages = [(s["name"], parse_params(s["params"])) for s in args.stages]
    with user_input():
        source = open_source(args.source, **parse_params(args.source_opt, "--source-opt"))
    annotations = getattr(source, "annotations", None) or {}
    if args.labels:
        annotations = load_labels(args.labels, getattr(source, "name", None))
    try:
        with user_input():  # calibrate checks its arguments and the history before resampling
            history = stop_if_all_dead(_history(source, args.source), args.source)
            cal = calibrate(history, stages[-1][0], stages[-1][1],
                            budget=args.budget, per=args.budget_per, labels=annotations,
                            margin=args.margin,
                            before=stages[:-1], exposure=args.exposure, grid=args.grid,
                            delay_runs=args.delay_runs, seed=args.seed)
    except UserError as exc:
        from shiftwatch.sinks.labels import LabelsError

        if isinstance(exc.__cause__, LabelsError):
            raise UserError(f"--labels {args.labels or args.source}: {exc}") from None
        raise
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    print(cal.summary())
    print(cal.table())
    try:
        written = cal.write(args.out)
    except WriteFailed as exc:
        if exc.written:
            print("wrote " + ", ".join(exc.written))
        print_failed(exc.failed)
        return EXIT_USAGE
    if cal.chosen is None:
        raise UserError(f"no {cal.param} in the declared range keeps false alarms within the "
                        f"budget on this history; allow a larger --budget (table above; "
                        f"wrote {written[0]})")
    print(f"chosen: {cal.param}={cal.chosen:.6g}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


# --------------------------------------------------------------------------------------


def _seconds(text: str) -> float:
    """argparse type of ``--connect-timeout``: seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be seconds > 0, got {text!r}")
    return value


#: Help of --connect-timeout, shared by the Kafka commands.
_CONNECT_HELP = ("seconds to wait for a first broker before stopping with one line (default: "
                 "$SHIFTWATCH_CONNECT_TIMEOUT, else 10)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shiftwatch",
        description="Change detectors and continual learners as stream operators: "
                    "replay logs locally, run as Kafka consumer groups.")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    from shiftwatch import __version__

    p.add_argument("--version", action="version", version=f"shiftwatch {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("replay", help="replay a log or data set through operators, "
                       "write outputs and an evaluation report")
    r.add_argument("source", help="a .csv/.jsonl file, river:NAME or synth:NAME "
                   "(see `shiftwatch sources`)")
    r.add_argument("--operator", action=_OperatorAction, metavar="NAME",
                   help="operator to apply (repeat to chain; see `shiftwatch operators`)")
    r.add_argument("--param", action=_ParamAction, metavar="K=V",
                   help="parameter of the preceding --operator (repeatable)")
    r.add_argument("--source-opt", action="append", metavar="K=V",
                   help="source option, e.g. value=temp, key=sensor, ts=time, n=2000")
    r.add_argument("--labels", help="true change points as positions in each key's stream "
                   "(0-based): '120,480' for every key, or a JSON file: [120, 480], "
                   "{\"s1\": [120], \"s2\": []} per key (names must be keys; \"*\": every "
                   "other key), or {key: {annotator: [...]}}")
    r.add_argument("--out", required=True, help="output directory")
    r.add_argument("--speed", type=float, default=None,
                   help="replay at real time x SPEED from ts (default: as fast as possible)")
    r.add_argument("--batch-size", type=int, default=1000,
                   help="records handed to the operators at a time (default 1000); outputs "
                        "do not depend on it, smaller batches reach the sinks sooner")
    r.add_argument("--no-progress", action="store_true",
                   help="do not show the progress bar on stderr")
    r.add_argument("--no-plots", action="store_true",
                   help="do not draw series.png / statistic.png (report.json and report.html "
                        "are still written)")
    r.add_argument("--quiet", action="store_true", help="do not print the alarm table")
    r.add_argument("--max-rows", type=int, default=20, help="rows of the alarm table")
    r.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics, /healthz, /readyz on PORT while replaying")
    r.add_argument("--metrics-host", default="127.0.0.1", metavar="ADDRESS",
                   help="address the metrics port listens on (default 127.0.0.1, this machine "
                        "only; 0.0.0.0 for every interface)")
    r.add_argument("--max-key-series", type=parse_max_key_series, default=100, metavar="N",
                   help="with --metrics-port: a series of alarms per key for the first N "
                        "keys to alarm (default 100); later keys count as key=_other")
    r.add_argument("--connect-timeout", type=_seconds, metavar="SECONDS",
                   help=_CONNECT_HELP + " (kafka: sources)")
    r.add_argument("--alert-url", metavar="URL",
                   help="POST each alarm as JSON to URL (a webhook; see --alert-opt)")
    r.add_argument("--alert-opt", action="append", metavar="K=V",
                   help="alert setting: format=json|slack, retries=3, backoff_s=0.5, "
                        "timeout_s=5 (the whole request), per_key_per_minute=10, "
                        "queue_size=10000, drain_s=20 (delivery goes on at the end), "
                        "undelivered=PATH (default OUT/alerts_undelivered.jsonl)")
    r.add_argument("--emit", choices=["all", "alarms"], default="all",
                   help="what the outputs file holds: every output (default) or only alarms "
                        "(the report still scores every output)")
    r.add_argument("--outputs-format", choices=["jsonl", "parquet"], default="jsonl",
                   help="write the outputs as outputs.jsonl (default) or outputs.parquet "
                        "(needs pyarrow: pip install 'shiftwatch[parquet]')")
    r.add_argument("--key-ttl", type=float, metavar="SECONDS", help="forget a key not seen for "
                   "SECONDS (of event time; see --key-clock); its next record starts it afresh")
    r.add_argument("--key-clock", default="event", choices=["event", "wall"],
                   help="what --key-ttl counts: record ts (event, the default) or seconds of "
                        "this run (wall)")
    r.add_argument("--max-keys", type=int, metavar="N",
                   help="keep at most N keys, forgetting the least recently seen first")
    r.add_argument("--allowed-lateness", type=float, metavar="SECONDS",
                   help="per key, a record whose ts is more than SECONDS before the key's "
                        "latest is a dead letter (reason 'late'); default: no limit")
    r.add_argument("--drop-duplicates", type=int, default=0, metavar="N",
                   help="drop a record equal (key, ts, every field) to one of its key's last "
                        "N records (0-10000; default 0, off); dropped records are not "
                        "counted as the key's positions")
    r.add_argument("--max-abs-value", type=float, metavar="X",
                   help="a record whose value (any entry) has a magnitude above X is a dead "
                        "letter (reason 'implausible'); default: only the hard limit 1e150")
    r.add_argument("--max-future-seconds", metavar="SECONDS",
                   help="a record whose ts is more than SECONDS ahead of the stream's clock "
                        "(its latest ts, or now if later) is a dead letter (reason "
                        "'future') and moves no clock; default 86400; 'off' checks nothing")
    r.set_defaults(func=cmd_replay, stages=None)

    k = sub.add_parser("run", help="run the stages of a pipeline file as Kafka consumer-group "
                       "members (SIGTERM: checkpoint, commit, leave the group; a lost cluster: "
                       "reconnect for up to 60 s, else one error line, exit status 2)")
    k.add_argument("pipeline", help="pipeline YAML file (see deploy/examples/)")
    k.add_argument("--stage", action="append", metavar="NAME",
                   help="run only this stage (repeatable; default: every stage)")
    k.add_argument("--bootstrap", help="override kafka.bootstrap_servers")
    k.add_argument("--metrics-file", help="write metrics JSON here ({stage} is replaced)")
    k.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus /metrics, /healthz, /readyz on PORT "
                        "(overrides metrics.port); /readyz fails while a stage cannot reach "
                        "the cluster, /healthz once that lasts longer than the liveness time")
    k.add_argument("--metrics-host", metavar="ADDRESS",
                   help="address the metrics port listens on (overrides metrics.address, "
                        "default 0.0.0.0 so that probes reach a container; 127.0.0.1 for this "
                        "machine only)")
    k.add_argument("--exit-when-idle", type=float, metavar="SECONDS",
                   help="stop (checkpointing first) after SECONDS without input (a "
                        "stage fed by another of this run: after it stopped too) once "
                        "every input partition is at its end; with partitions still "
                        "behind after two session timeouts more, stop with status 1 "
                        "naming them")
    k.add_argument("--reset-state", metavar="PARTITIONS",
                   help="drop the changelog state of these input partitions (0,2 or all) "
                        "when assigned and start them afresh from the group's committed "
                        "offset: the way out of a damaged changelog or one written with "
                        "other operator parameters")
    k.add_argument("--connect-timeout", type=_seconds, metavar="SECONDS",
                   help=_CONNECT_HELP + "; overrides kafka.bootstrap_timeout_ms")
    k.add_argument("--quiet", action="store_true", help="log warnings only")
    k.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="replay River's real change-point series through several "
                       "detectors side by side (no broker)")
    d.add_argument("--out", default="shiftwatch-demo", help="output directory")
    d.add_argument("--dataset", action="append", help="river drift dataset (repeatable)")
    d.add_argument("--detector", action="append", help="operator name (repeatable)")
    d.add_argument("--no-plots", action="store_true", help="do not draw demo.png / "
                   "sensor_demo.png (the tables are still printed)")
    d.add_argument("--no-sensors", action="store_true",
                   help="skip the multichannel part (Occupancy through window_covariance -> "
                        "karcher)")
    d.add_argument("--kafka", action="store_true",
                   help="instead: start the local broker, produce a sensor stream, run "
                        "deploy/examples/sensors.yaml's stages on it, print the alarms and "
                        "dead letters read back from Kafka, stop (needs the dev extra)")
    d.set_defaults(func=cmd_demo)

    from shiftwatch.deploy.compare import add_parser as add_compare

    add_compare(sub, "source option, e.g. value=temp, key=sensor, ts=time, n=2000")

    c = sub.add_parser("calibrate", help="choose a detector's sensitivity (delta, threshold, "
                       "alpha) for a false-alarm budget by resampling the quiet history")
    c.add_argument("source", help="a .csv/.jsonl file, river:NAME or synth:NAME")
    c.add_argument("--operator", action=_OperatorAction, metavar="NAME",
                   help="the detector to calibrate (the last --operator; earlier ones, e.g. "
                        "standardize, run in front of it unchanged)")
    c.add_argument("--param", action=_ParamAction, metavar="K=V",
                   help="fixed parameter of the preceding --operator (repeatable)")
    c.add_argument("--source-opt", action="append", metavar="K=V",
                   help="source option, e.g. value=temp, key=sensor, ts=time")
    c.add_argument("--labels", help="known change points to cut out, as positions in each "
                   "key's stream (0-based, as for replay): '120,480' for every key, or a JSON "
                   "file ({\"s1\": [120], \"s2\": []} per key)")
    c.add_argument("--budget", default="1/10000",
                   help="false alarms allowed per unit, e.g. 1/10000 (default) or 0.5")
    c.add_argument("--budget-per", default="record", choices=["record", "hour", "day", "week"],
                   help="the budget's unit; hour/day/week use the records' ts (seconds)")
    c.add_argument("--margin", type=int, default=50,
                   help="records cut on each side of each label (default 50)")
    c.add_argument("--exposure", type=float, default=20.0,
                   help="replicate length per candidate, in false alarms expected at the "
                        "budget (default 20)")
    c.add_argument("--grid", type=int, default=9, help="grid size before bisection")
    c.add_argument("--delay-runs", type=int, default=10,
                   help="runs per injected shift for the delay columns (0: skip)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", default="calibration",
                   help="output directory (calibration.json, calibrated.yaml)")
    c.set_defaults(func=cmd_calibrate, stages=None)

    o = sub.add_parser("operators", help="list operators with their parameters (with NAME: "
                       "what each parameter means)")
    o.add_argument("name", nargs="?", metavar="NAME",
                   help="describe one operator's parameters, e.g. `shiftwatch operators cs`")
    o.add_argument("--json", action="store_true")
    o.set_defaults(func=cmd_operators)

    b = sub.add_parser("broker", help="run a local Kafka-protocol broker (tansu, from the dev "
                       "extra) in the foreground, in memory: for trying things out, not for "
                       "production")
    b.add_argument("--port", type=int, default=9092, help="port to listen on (default 9092)")
    b.add_argument("--host", default="127.0.0.1",
                   help="address to listen on and advertise (default 127.0.0.1)")
    b.set_defaults(func=cmd_broker)

    pr = sub.add_parser("produce", help="write a file or data set into a Kafka topic as JSON "
                        "records, one message per record")
    pr.add_argument("source", help="a .csv/.jsonl file, river:NAME or synth:NAME "
                    "(see `shiftwatch sources`)")
    pr.add_argument("--topic", required=True, help="the topic to write to")
    pr.add_argument("--key", metavar="FIELD",
                    help="for a file, the column holding each record's key (as --source-opt "
                         "key=FIELD); otherwise the record field; its text is the message key")
    pr.add_argument("--source-opt", action="append", metavar="K=V",
                    help="source option, e.g. value=temp, ts=time, n=2000")
    pr.add_argument("--rate", type=float, metavar="N",
                    help="records per second (default: as fast as the broker takes them)")
    pr.add_argument("--partitions", type=int, metavar="N",
                    help="create the topic with N partitions when it does not exist")
    pr.add_argument("--bootstrap", metavar="HOST:PORT",
                    help="the cluster (default: $KAFKA_BOOTSTRAP, else localhost:9092)")
    pr.add_argument("--limit", type=int, metavar="N", help="stop after N records")
    pr.add_argument("--dead-letters", metavar="PATH",
                    help="write the source's unreadable lines here (JSON lines)")
    pr.add_argument("--no-progress", action="store_true",
                    help="do not show the progress bar on stderr")
    pr.add_argument("--connect-timeout", type=_seconds, metavar="SECONDS", help=_CONNECT_HELP)
    pr.set_defaults(func=cmd_produce)

    cs = sub.add_parser("consume", help="print what a stage wrote (an output or dead-letter "
                        "topic) as a table or JSON lines, duplicates of a restart dropped "
                        "with --dedupe; no consumer group, nothing committed")
    cs.add_argument("topic", help="the topic to read, e.g. sensors.alarms or "
                    "<pipeline>.<stage>.dlq")
    cs.add_argument("--bootstrap", metavar="HOST:PORT",
                    help="the cluster (default: $KAFKA_BOOTSTRAP, else localhost:9092)")
    cs.add_argument("--from-beginning", action="store_true",
                    help="read from the start of every partition (default: from the end the "
                         "topic has now, which needs --follow)")
    cs.add_argument("--follow", action="store_true",
                    help="keep reading new messages until Ctrl-C (default: stop at the end "
                         "the topic had when consume started)")
    cs.add_argument("--alarms-only", action="store_true",
                    help="show only outputs with alarm: true")
    cs.add_argument("--dedupe", action="store_true",
                    help="drop outputs and dead letters repeating earlier input coordinates "
                         "(what a stage writes again after a restart, at least once)")
    cs.add_argument("--format", choices=["table", "jsonl"], default="table",
                    help="table (default: key, time, located change, statistic, input "
                         "coordinates; dead letters: origin, key, reason, raw) or jsonl (each "
                         "record as the stage wrote it)")
    cs.add_argument("--connect-timeout", type=_seconds, metavar="SECONDS", help=_CONNECT_HELP)
    cs.set_defaults(func=cmd_consume)

    s = sub.add_parser("sources", help="list source kinds and shipped data sets")
    s.set_defaults(func=cmd_sources)
    ra = sub.add_parser("resend-alerts", help="POST again the alarms of an undelivered-alerts "
                        "file (what a webhook did not take); the file keeps only those still "
                        "undelivered")
    ra.add_argument("file", help="the file (alerts_undelivered.jsonl of a replay, or the "
                                 "alerts' undelivered: path of a stage)")
    ra.add_argument("--alert-url", required=True, metavar="URL", help="where to POST them")
    ra.add_argument("--alert-opt", action="append", metavar="K=V",
                    help="alert setting: retries=3, backoff_s=0.5, timeout_s=5, drain_s=20")
    ra.set_defaults(func=cmd_resend_alerts)
    return p


def cmd_resend_alerts(args) -> int:
    from shiftwatch.sinks.alerts import redact_url, resend

    settings = parse_params(args.alert_opt, "--alert-opt")
    unknown = sorted(set(settings) - {"retries", "backoff_s", "max_backoff_s", "timeout_s",
                                      "drain_s"})
    if unknown:
        raise UserError(f"--alert-opt {unknown[0]} does not apply to resend-alerts (it takes "
                        "retries, backoff_s, max_backoff_s, timeout_s, drain_s)")
    if not Path(args.file).is_file():
        raise UserError(f"no such file: {args.file}")
    with user_input():
        done = resend(args.file, args.alert_url, **settings)
    where = redact_url(args.alert_url)
    if done["left"]:
        print(f"resent {done['sent']} of {done['alarms']} alarms to {where}; {done['left']} "
              f"still undelivered, kept in {args.file}")
        return 1
    print(f"resent {done['sent']} of {done['alarms']} alarms to {where}; none left "
          f"({args.file} removed)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    if args.debug or os.environ.get("SHIFTWATCH_DEBUG"):
        return args.func(args)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("shiftwatch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`shiftwatch operators | head`): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except MemoryError as exc:  # not a bug: what the run asked for does not fit
        import traceback

        frames = traceback.extract_tb(exc.__traceback__)
        where = next((f"{Path(f.filename).parent.name}/{Path(f.filename).name}:{f.name}"
                      for f in reversed(frames) if "shiftwatch" in f.filename
                      or "/operators/" in f.filename or "/sinks/" in f.filename), None)
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else "no detail"
        print(f"shiftwatch: error: out of memory ({what}) while building "
              f"{where or 'the run'}: the run needs more memory than this machine gives it; "
              "lower the parameter that sizes it (a window, a burn-in, a dimension) or the "
              "number of keys; outputs written so far are kept", file=sys.stderr)
        return EXIT_USAGE
    except (UserError, OSError, yaml.YAMLError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, FileNotFoundError) and exc.filename:
            msg = f"no such file: {exc.filename}"
        print(f"shiftwatch: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug, not a user error (a ValueError too): show where
        from shiftwatch.deploy.kafka.connect import is_unreachable, unreachable_message

        if is_unreachable(exc):  # no broker answered within the bounded wait: one line
            hint = ("give its address in the source: kafka:TOPIC?bootstrap=HOST:PORT"
                    if args.command == "replay" else None)
            waited = getattr(args, "waited_s", None) or getattr(args, "connect_timeout", None)
            print(f"shiftwatch: error: {unreachable_message(exc, hint, waited)}",
                  file=sys.stderr)
            return EXIT_USAGE
        import traceback

        traceback.print_exc(file=sys.stderr)
        print(f"shiftwatch: internal error: {type(exc).__name__}: {exc} (a bug in shiftwatch "
              "or a library; please report it with the traceback above)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
