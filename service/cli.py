"""The ``statestore`` command: ``serve``, ``broker``, ``demo`` and ``version``."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from service.exceptions import ConfigError
from service.logs import configure_logging

if TYPE_CHECKING:
    from service.settings import Settings

logger = logging.getLogger("statestore")


def _version() -> str:
    try:
        return importlib.metadata.version("statestore")
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser of ``statestore``."""
    parser = argparse.ArgumentParser(
        prog="statestore",
        description="A shared, read-only state store served from a Kafka changelog.",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = commands.add_parser(
        "serve",
        help="serve the configured stores over HTTP",
        description="Materialize the configured topics and serve them over HTTP (uvicorn).",
    )
    serve.add_argument(
        "--config",
        type=Path,
        default=None,
        help="YAML configuration file; STATESTORE_... variables override it (nested keys joined by __)",
    )
    serve.add_argument("--host", default=None, help="listen address (overrides http.host)")
    serve.add_argument("--port", type=int, default=None, help="listen port (overrides http.port)")
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        default=None,
        help="log lines as text or one JSON object per line (overrides logging.format)",
    )
    serve.add_argument(
        "--access-log",
        action="store_true",
        default=None,
        help="log one line per HTTP request (overrides logging.access_log)",
    )

    broker = commands.add_parser(
        "broker",
        help="start the embedded Kafka-protocol broker, for development (memory only)",
        description="Start the embedded Kafka-protocol broker (Tansu) on this machine's loopback, for "
        "development and trying statestore out: it keeps its topics in memory only, so stopping it "
        "(Ctrl-C) drops them. Needs statestore[demo].",
    )
    broker.add_argument("--port", type=int, default=9092, help="loopback port to listen on (default 9092)")
    broker.add_argument(
        "--log", type=Path, default=None, metavar="FILE", help="append the broker's log to FILE"
    )

    demo = commands.add_parser(
        "demo",
        help="run the end-to-end demo: broker, service and a Spark lookup join",
        description="Seed a topic, serve it, and join purchases against it with Spark.",
    )
    demo.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        default=None,
        help="use this Kafka broker instead of starting the embedded one",
    )
    demo.add_argument(
        "--service-url", metavar="URL", default=None, help="use this running service instead of starting one"
    )
    demo.add_argument(
        "--step", choices=["all", "seed", "join"], default="all", help="run only one step (default: all)"
    )
    demo.add_argument(
        "--purchases", type=int, default=100_000, metavar="N", help="purchases to join (default 100000)"
    )
    demo.add_argument(
        "--state-dir", type=Path, default=None, metavar="DIR", help="where the demo keeps its stores"
    )
    demo.add_argument(
        "--shards",
        type=int,
        default=1,
        metavar="N",
        help="serve the stores as N shards, one `statestore serve` process each (default 1: unsharded)",
    )

    commands.add_parser("version", help="print the version", description="Print the statestore version.")
    return parser


def _serve(args: argparse.Namespace) -> int:
    # Imported here so `statestore --help` and `version` start fast.
    import uvicorn  # noqa: PLC0415

    from service.app import create_app  # noqa: PLC0415
    from service.connections import server_options  # noqa: PLC0415
    from service.settings import load_settings  # noqa: PLC0415
    from service.startup import check_startup  # noqa: PLC0415

    if args.log_format is not None:  # before the configuration is read, so its errors come formatted too
        configure_logging(args.log_level, args.log_format)
    settings = _with_logging_options(load_settings(args.config), args)
    if args.log_format is None and settings.logging.format != "text":
        configure_logging(args.log_level, settings.logging.format)
    check_startup(settings)
    host = args.host or settings.http.host
    port = settings.http.port if args.port is None else args.port
    tls = settings.http.tls
    logger.info(
        "statestore %s: %d store(s) from %s, state in %s, listening on %s:%d%s",
        _version(),
        len(settings.stores),
        args.config or "the environment",
        settings.state_dir,
        host,
        port,
        " (TLS)" if tls else "",
    )
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        loop="uvloop",
        **server_options(settings),
        log_config=None,
        access_log=False,
        ssl_certfile=str(tls.certfile) if tls else None,
        ssl_keyfile=str(tls.keyfile) if tls else None,
    )
    return 0


def _broker(args: argparse.Namespace) -> int:
    from service.local.broker import LocalBrokerError, run_until_stopped  # noqa: PLC0415

    try:
        run_until_stopped(args.port, sys.stdout, args.log)
    except LocalBrokerError as exc:
        print(f"statestore broker: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _with_logging_options(settings: Settings, args: argparse.Namespace) -> Settings:
    """``settings`` with the command line's logging options applied over the file's and environment's."""
    chosen = {
        name: value
        for name, value in (("format", args.log_format), ("access_log", args.access_log))
        if value is not None
    }
    if not chosen:
        return settings
    return settings.model_copy(update={"logging": settings.logging.model_copy(update=chosen)})


def _demo(args: argparse.Namespace) -> int:
    try:
        demo = importlib.import_module("service.local.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "service.local.demo":
            raise
        print("statestore demo is not available in this build yet (service.local.demo is missing).")
        return 0
    result: int = demo.run(args)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``statestore`` command; returns the exit status."""
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "broker":
            return _broker(args)
        if args.command == "demo":
            return _demo(args)
        print(f"statestore {_version()}")
        return 0
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
