"""``statestore demo``: the whole product on this machine, end to end.

1. start the embedded broker (or use ``--bootstrap-servers``);
2. create the topics and load the invoice dataset (``service.local.demo.dataset``);
3. start the service (or use ``--service-url``) and show the stores restoring;
4. enrich purchases into invoices with a Spark lookup join, print a sample and a summary;
5. raise a product's price in its topic and show the next lookup sees it;
6. shut everything down, also on Ctrl-C (exit status 130) or SIGTERM (143).

``--step seed`` only does 2 against ``--bootstrap-servers``; ``--step join`` only does 4 and 5
against ``--service-url`` (5 only when a broker is given too). ``--shards N`` serves the stores as N
shards, one ``statestore serve`` process each, and joins through the URL template naming them.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from service.local.demo.console import Console, seconds
from service.local.demo.errors import DemoError
from service.local.shards import MAX_LOCAL_SHARDS

__all__ = ["DemoError", "run"]

logger = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# Loggers whose INFO lines would drown the demo's own output; their warnings still show.
_CHATTY_LOGGERS = ("store", "service", "clients", "uvicorn", "py4j", "httpx")


def _check_arguments(args: argparse.Namespace) -> None:
    if args.purchases < 1:
        raise DemoError(f"--purchases must be at least 1, got {args.purchases}")
    shards = getattr(args, "shards", 1)
    if not 1 <= shards <= MAX_LOCAL_SHARDS:
        raise DemoError(f"--shards must be between 1 and {MAX_LOCAL_SHARDS} on one machine, got {shards}")
    if shards > 1 and (args.service_url or args.step != "all"):
        raise DemoError(
            "--shards starts the demo's own shard processes: drop --service-url and --step (a running "
            "sharded service is joined with --step join --service-url 'http://HOST-{shard}:PORT')"
        )
    if args.step == "seed" and not args.bootstrap_servers:
        raise DemoError(
            "--step seed needs --bootstrap-servers HOST:PORT: the embedded broker keeps data in memory "
            "only and stops with the demo (run without --step to do everything)"
        )
    if args.step == "join" and not args.service_url:
        raise DemoError(
            "--step join needs --service-url URL of a running service (run without --step to do everything)"
        )
    if args.step == "all" and args.service_url and not args.bootstrap_servers:
        raise DemoError(
            "--service-url also needs --bootstrap-servers: the demo loads its data into the broker that "
            "service reads (or use --step join to only run the join)"
        )


def _not_py4j_interrupt(record: logging.LogRecord) -> bool:
    # py4j logs Ctrl-C during a call to the JVM with a traceback on the root logger; the demo
    # reports the interrupt itself.
    return record.msg != "KeyboardInterrupt while sending command."


def _quiet_libraries(level: str) -> None:
    logging.getLogger().addFilter(_not_py4j_interrupt)
    if logging.getLevelName(level) <= logging.DEBUG:
        return
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    # The demo's own service is open on loopback only, and the demo says so itself.
    logging.getLogger("service.app").setLevel(logging.ERROR)


@contextlib.contextmanager
def _terminate_like_interrupt(received: list[int]) -> Iterator[None]:
    """SIGTERM (``kill``, ``docker stop``) shuts down as cleanly as Ctrl-C; records the signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _ignoring_interrupts() -> Iterator[None]:
    """Let shutdown finish: a second Ctrl-C must not leave a broker or a JVM behind."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run_all(
    console: Console, args: argparse.Namespace, stack: contextlib.ExitStack, spark_stack: contextlib.ExitStack
) -> None:
    from service.local.demo import steps  # noqa: PLC0415
    from service.local.demo.serving import import_service  # noqa: PLC0415
    from service.local.demo.spark import BackgroundSpark, check_spark_prerequisites  # noqa: PLC0415

    if args.step in ("all", "join"):
        check_spark_prerequisites()
    if args.step == "all" and not args.bootstrap_servers:
        steps.check_embedded_broker()
    if args.step == "seed":
        console.stage(f"using the Kafka broker at {args.bootstrap_servers}")
        steps.seed(console, args.bootstrap_servers, args.purchases)
        return
    if args.step == "join":
        # Before Spark starts: a service without the demo's data fails in a second, not after a JVM.
        steps.await_service(console, args.service_url, own=False)
    if args.step == "all" and not args.service_url:
        import_service()
    # Spark takes seconds to start: start it now, on a thread, while the data loads and restores.
    # It has its own exit stack, closed first: Spark stops before the service and the broker.
    spark = spark_stack.enter_context(BackgroundSpark())
    spark_stack.callback(console.detail, "stopping Spark")
    bootstrap_servers: str | None = args.bootstrap_servers
    url: str | None = args.service_url
    if args.step == "all":
        if bootstrap_servers is None:
            workdir = Path(stack.enter_context(_temporary_dir()))
            bootstrap_servers = stack.enter_context(steps.embedded_broker(console, workdir / "broker.log"))
        else:
            console.stage(f"using the Kafka broker at {bootstrap_servers}")
        steps.seed(console, bootstrap_servers, args.purchases)
        if url is None and getattr(args, "shards", 1) > 1:
            url = stack.enter_context(
                steps.own_shards(console, bootstrap_servers, args.state_dir, args.shards)
            )
        elif url is None:
            url = stack.enter_context(steps.own_service(console, bootstrap_servers, args.state_dir))
            steps.await_service(console, url, own=True)
        else:
            steps.await_service(console, url, own=False)
    assert url is not None
    joined = steps.join(console, spark, url, bootstrap_servers, args.purchases)
    if bootstrap_servers is None:
        console.stage(
            "skipping the price update: it writes to the products topic, and no --bootstrap-servers was given"
        )
        return
    steps.update_price(console, url, bootstrap_servers, joined)


@contextlib.contextmanager
def _temporary_dir() -> Iterator[str]:
    import tempfile  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="statestore-demo-") as path:
        yield path


def _stage_count(args: argparse.Namespace) -> int:
    if args.step == "seed":
        return 2
    if args.step == "join":
        return 4
    return 6


def run(args: argparse.Namespace) -> int:
    """Run the demo as ``args`` (from ``statestore demo``) asks; returns the exit status."""
    console = Console(_stage_count(args))
    try:
        _check_arguments(args)
    except DemoError as exc:
        console.error(str(exc))
        return EXIT_USAGE
    _quiet_libraries(getattr(args, "log_level", "INFO"))
    started = time.monotonic()
    status = EXIT_OK
    stack, spark_stack = contextlib.ExitStack(), contextlib.ExitStack()
    received: list[int] = []
    try:
        with _terminate_like_interrupt(received):
            _run_all(console, args, stack, spark_stack)
    except KeyboardInterrupt:
        status = 128 + received[0] if received else EXIT_INTERRUPTED
        console.notice(f"{'terminated' if received else 'interrupted'}: shutting down ...")
    except DemoError as exc:
        status = EXIT_FAILED
        console.error(str(exc))
    except Exception as exc:
        status = EXIT_FAILED
        # Anything else is a defect of the demo or of what it drives: keep the traceback for a report.
        logger.exception("the demo failed unexpectedly")
        console.error(f"the demo failed: {type(exc).__name__}: {exc}")
    finally:
        with _ignoring_interrupts():
            if args.step != "seed" and status == EXIT_OK:
                console.stage("shutting down ...")
            for resources in (spark_stack, stack):
                try:
                    resources.close()
                except Exception as exc:
                    logger.exception("shutting the demo down failed")
                    console.error(f"shutting down failed: {type(exc).__name__}: {exc}")
                    status = status or EXIT_FAILED
    if status == EXIT_OK:
        console.detail(f"done in {seconds(time.monotonic() - started)}")
    return status
