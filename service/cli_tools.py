"""The everyday commands of ``statestore``: ``get`` and ``scan`` a store, ``check-config``.

``get`` and ``scan`` read a running service over HTTP (``--url`` or ``STATESTORE_URL``, a token from
``STATESTORE_TOKEN``) and print one JSON object per key on standard output, so their output pipes
into ``jq`` and scripts; an error is one line on standard error and a non-zero exit status.
``check-config`` validates a configuration (a file, the ``STATESTORE_...`` variables, or both) as
``serve`` would, without connecting anywhere, and prints the effective configuration with every
secret masked.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import yaml
from pydantic import ValidationError

from clients import StatestoreClient, StatestoreClientError, UnauthorizedError
from clients.environment import TOKEN_VARIABLE, URL_VARIABLE
from service.exceptions import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


Subcommands = argparse._SubParsersAction  # argparse names the type of add_subparsers() privately


def add_commands(commands: Subcommands[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """Add ``get``, ``scan`` and ``check-config`` to the ``statestore`` parser's subcommands."""
    get = commands.add_parser(
        "get",
        parents=[common],
        help="print the values of keys of a store, one JSON line per key",
        description="Read keys from a running service and print one JSON object per key, in the order "
        'given: {"key": ..., "found": true|false, "value": ..., "position": "0:12,1:9"} (a store of '
        'bytes gives "value_base64"). The token comes from ' + TOKEN_VARIABLE + ".",
    )
    get.add_argument("store", metavar="STORE", help="the store's name")
    get.add_argument("keys", metavar="KEY", nargs="+", help="the keys to read")
    _add_reading_options(get)

    scan = commands.add_parser(
        "scan",
        parents=[common],
        help="print the keys of a store that start with a prefix, one JSON line per key",
        description="Print every key of a store starting with PREFIX, in key order, with its value: "
        'one JSON object per line, {"key": ..., "value": ...}. The token comes from ' + TOKEN_VARIABLE + ".",
    )
    scan.add_argument("store", metavar="STORE", help="the store's name")
    scan.add_argument("prefix", metavar="PREFIX", nargs="?", default="", help="the key prefix (default: all)")
    scan.add_argument("--limit", type=int, default=None, metavar="N", help="stop after N keys")
    _add_reading_options(scan)

    check = commands.add_parser(
        "check-config",
        parents=[common],
        help="validate a configuration and print the effective one, secrets masked",
        description="Validate the configuration `statestore serve` would run with (the file, with "
        "STATESTORE_... variables over it) without connecting anywhere, and print it as YAML with "
        "every secret masked. Exit status 2 and one line per mistake when it is invalid.",
    )
    check.add_argument(
        "--config", type=Path, default=None, help="YAML configuration file (default: the variables alone)"
    )


def _add_reading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", default=None, help=f"the service URL, e.g. http://127.0.0.1:8080 (default: ${URL_VARIABLE})"
    )
    parser.add_argument(
        "--min-position", default=None, metavar="POSITION", help="demand at least this position"
    )
    parser.add_argument(
        "--as-of", default=None, metavar="POSITION", help="read exactly this position (a store with history)"
    )
    parser.add_argument(
        "--deadline", type=float, default=30.0, metavar="SECONDS", help="give up after (default 30)"
    )


def run(args: argparse.Namespace, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    """Run ``get``, ``scan`` or ``check-config`` as parsed in ``args``; returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    if args.command == "check-config":
        return check_config(args.config, out, err)
    if logging.getLevelName(getattr(args, "log_level", "INFO")) > logging.DEBUG:
        # A line per request and per retry would bury the one error line (--log-level DEBUG shows them).
        for name in ("httpx", "clients"):
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        with StatestoreClient.from_url(args.url, deadline=args.deadline) as client:
            lines = _get_lines(client, args) if args.command == "get" else _scan_lines(client, args)
            for line in lines:
                print(json.dumps(line, ensure_ascii=False), file=out, flush=True)
    except (StatestoreClientError, ValueError) as exc:
        hint = (
            f"; set {TOKEN_VARIABLE} to a token the service accepts"
            if isinstance(exc, UnauthorizedError)
            else ""
        )
        print(f"statestore {args.command}: error: {_one_line(exc)}{hint}", file=err)
        return EXIT_FAILED
    return EXIT_OK


def _read_at(args: argparse.Namespace) -> dict[str, Any]:
    return {"min_position": args.min_position, "as_of": args.as_of}


def _get_lines(client: StatestoreClient, args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    values, position = client.get_many_with_position(args.store, args.keys, **_read_at(args))
    for key, value in zip(args.keys, values, strict=True):
        yield {"key": key, "found": value is not None, **_value_member(value), "position": str(position)}


def _scan_lines(client: StatestoreClient, args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    if args.limit is not None and args.limit < 0:
        raise ValueError(f"--limit must be 0 or more, got {args.limit}")
    rows: Iterable[tuple[Any, Any]] = client.scan(args.store, args.prefix, **_read_at(args))
    for count, (key, value) in enumerate(rows):
        if args.limit is not None and count >= args.limit:
            return
        yield {"key": key, **_value_member(value)}


def _value_member(value: Any) -> dict[str, Any]:
    """``{"value": value}``; bytes (a store of raw bytes) as ``{"value_base64": ...}``."""
    if isinstance(value, bytes):
        return {"value_base64": base64.b64encode(value).decode("ascii")}
    return {"value": value}


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def check_config(path: Path | None, out: IO[str], err: IO[str]) -> int:
    """Validate the configuration of ``path`` and the environment; print it, or its mistakes."""
    from service.settings import load_settings  # noqa: PLC0415
    from service.startup import check_kafka, check_tls  # noqa: PLC0415

    try:
        settings = load_settings(path)
        check_kafka(settings)
        if settings.http.tls is not None:
            check_tls(settings.http.tls)
    except ConfigError as exc:
        for line in mistakes(exc):
            print(f"statestore check-config: error: {line}", file=err)
        return EXIT_CONFIG
    effective = settings.model_dump(mode="json")  # SecretStr values come out masked
    print(f"# the effective configuration from {path or 'the environment'} (secrets masked)", file=out)
    print(yaml.safe_dump(effective, sort_keys=False, allow_unicode=True), end="", file=out)
    return EXIT_OK


def mistakes(error: ConfigError) -> list[str]:
    """One line per invalid setting (the validation errors behind ``error``), else its message."""
    cause = error.__cause__
    if isinstance(cause, ValidationError):
        return [
            f"{'.'.join(str(p) for p in problem['loc']) or '(top level)'}: {' '.join(problem['msg'].split())}"
            for problem in cause.errors()
        ]
    return [_one_line(error)]
