"""The FastAPI application: store routes, probes, metrics, and the stores' lifecycle."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Mapping

import anyio
import orjson
from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from service import openapi_docs as docs
from service import openapi_stores
from service.access_log import AccessLogMiddleware
from service.api_docs import add_api_docs
from service.auth import Auth
from service.guard import InFlight, RequestGuard
from service.key_path import KeyEndpoint, KeyPath, RouteEndpoint
from service.memory_limit import memory_limit
from service.metrics import CONTENT_TYPE, Metrics, MetricsMiddleware
from service.problems import install_problem_handlers
from service.reads import Reader
from service.registry import StoreRegistry
from service.routes import BATCH_ROUTE, KEY_ROUTE, add_store_routes
from service.settings import Settings, store_configs
from service.status_page import add_status_page
from service.values import BadValues
from store import RestoreSlots, ServableStore, Store, StoreConfig

logger = logging.getLogger(__name__)

_JSON = "application/json"


def _start_in_background(registry: StoreRegistry, stores: Mapping[str, Store]) -> list[threading.Thread]:
    """Start every store on its own thread, so the app serves (and /healthz answers) meanwhile."""

    def start(store: Store) -> None:
        try:
            store.start()
        except Exception as exc:  # one store failing to start must not stop the others or the service
            logger.exception("store %s failed to start", store.name, extra={"store": store.name})
            registry.record_start_error(store.name, f"{type(exc).__name__}: {exc}")

    threads = [
        threading.Thread(target=start, args=(store,), name=f"start-{name}", daemon=True)
        for name, store in stores.items()
    ]
    for thread in threads:
        thread.start()
    return threads


class ServiceApp(FastAPI):
    """The FastAPI app, handing key GETs and batch gets to the short paths of ``service.key_path``."""

    # By method: the route a request must match to take the short path, and the path (the
    # service's middleware around its endpoint). Set once the routes are added.
    short_paths: dict[str, tuple[Route, ASGIApp]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            short = self.short_paths.get(scope["method"])
            matched = None if short is None else short[0].path_regex.match(scope["path"])
            if short is not None and matched is not None:
                route, path = short
                # What the router would put in the scope for this route (its parameters need no
                # conversion: they are text).
                scope["app"] = self
                scope["path_params"] = matched.groupdict()
                scope["route"] = route
                scope["endpoint"] = route.endpoint
                await path(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, stores: Mapping[str, ServableStore] | None = None) -> FastAPI:
    """The service for ``settings``.

    With ``stores`` given, the app serves them and leaves their lifecycle to the caller; without,
    it builds one ``store.Store`` per configured store, starts them when it starts (without waiting
    for them to restore) and stops them when it stops.
    """
    owned: dict[str, Store] = {}
    if stores is None:
        slots = RestoreSlots(settings.engine.max_concurrent_bulk_restores)
        configs = store_configs(settings)
        _log_shared_block_cache(configs)
        owned = {config.name: Store(config, slots) for config in configs}
        stores = owned
    registry = StoreRegistry(settings, stores)
    metrics = Metrics(registry)
    auth = Auth(settings.auth, [s.name for s in settings.stores])
    reader = Reader(registry, settings)
    bad_values = BadValues(metrics.invalid_value)
    protect_metrics = settings.auth.metrics == "token"

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.limits.max_position_waiters is not None:
            logger.warning(
                "limits.max_position_waiters is set but limits nothing: position waits hold no thread,"
                " and limits.max_concurrent_requests_per_client bounds them per client; remove it"
            )
        if settings.auth.mode == "open":
            logger.warning(
                "auth.mode is 'open': every client may read every store;"
                " set auth.mode=tokens outside development"
            )
        starters = _start_in_background(registry, owned)
        logger.info("serving stores: %s", ", ".join(registry.names()) or "(none)")
        try:
            yield
        finally:
            reader.close()
            for thread in starters:
                await anyio.to_thread.run_sync(thread.join)
            for name, store in owned.items():
                if registry.start_error(name) is None:
                    try:
                        await anyio.to_thread.run_sync(store.stop)
                    except Exception:  # stopping one store must not keep the others open
                        logger.exception("store %s failed to stop cleanly", name, extra={"store": name})

    app = ServiceApp(
        title="statestore",
        version="1",
        description="Read-only lookups in tables materialized from compacted Kafka topics.",
        lifespan=lifespan,
        redirect_slashes=False,
        docs_url=None,  # served by add_api_docs, from the package rather than a CDN
        redoc_url=None,
    )
    app.state.registry = registry
    app.state.settings = settings
    app.state.metrics = metrics
    install_problem_handlers(app)
    in_flight = InFlight()  # one count for both paths into the app
    # Added last, the metrics middleware is outermost: it also counts what the guard refuses.
    app.add_middleware(
        RequestGuard, limits=settings.limits, auth=auth, on_refusal=metrics.refused, in_flight=in_flight
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if settings.logging.access_log:
        app.add_middleware(AccessLogMiddleware, auth=auth)
    keys = add_store_routes(app, settings, registry, auth, reader, bad_values)
    # The short paths of key GETs and batch gets: the guard's admission and counts (shared with
    # the other routes' guard), the endpoint and the metrics, in one call.
    guard = RequestGuard(app.router, settings.limits, auth, metrics.refused, in_flight)
    key_route = next(r for r in app.router.routes if type(r) is Route and r.path == KEY_ROUTE)
    batch_route = next(r for r in app.router.routes if isinstance(r, APIRoute) and r.path == BATCH_ROUTE)
    paths: dict[str, tuple[Route, ASGIApp]] = {
        "GET": (key_route, KeyPath(KeyEndpoint(keys), guard, metrics, KEY_ROUTE)),
        "POST": (
            batch_route,
            KeyPath(RouteEndpoint(batch_route.endpoint), guard, metrics, BATCH_ROUTE, "POST"),
        ),
    }
    if settings.logging.access_log:
        paths = {method: (route, AccessLogMiddleware(path, auth)) for method, (route, path) in paths.items()}
    app.short_paths = paths
    add_status_page(app, registry, auth)
    add_api_docs(app)
    openapi_stores.install(app, settings)

    @app.get("/healthz", response_class=Response, responses=docs.HEALTH_RESPONSES, summary="Liveness")
    async def healthz() -> Response:
        return Response(b'{"status":"alive"}', media_type=_JSON)

    @app.get("/readyz", response_class=Response, responses=docs.READY_RESPONSES, summary="Readiness")
    async def readyz() -> Response:
        # Ready means "answers reads": a store rebuilding behind its last good copy still does,
        # and all replicas rebuild at once when a topic is recreated.
        states = {served.name: registry.state_of(served) for served in registry.all()}
        ready = all(registry.readable(served) for served in registry.all())
        body = {
            "status": "ready" if ready else "not-ready",
            "stores": {n: s.value for n, s in states.items()},
        }
        return Response(orjson.dumps(body), status_code=200 if ready else 503, media_type=_JSON)

    @app.get(
        "/metrics", response_class=Response, responses=docs.METRICS_RESPONSES, summary="Prometheus metrics"
    )
    async def prometheus_metrics(request: Request) -> Response:
        if protect_metrics:
            auth.allowed_stores(request)  # 401 without a valid token
        # Scraping asks every store for its status, which may touch the disk.
        return Response(await anyio.to_thread.run_sync(metrics.render), media_type=CONTENT_TYPE)

    metrics.templates.update({route.endpoint: route.path for route in app.routes if isinstance(route, Route)})
    return app


def _log_shared_block_cache(configs: list[StoreConfig]) -> None:
    sharing = [config for config in configs if config.tuning.rocksdb.share_block_cache]
    if sharing:
        limit = memory_limit()
        logger.info(
            "stores %s share one block cache of %d MiB (engine.block_cache_bytes: auto, half of the"
            " memory limit of %d MiB from %s); set a size instead to give each store its own",
            ", ".join(config.name for config in sharing),
            sharing[0].tuning.rocksdb.block_cache_bytes // 2**20,
            limit.bytes // 2**20,
            limit.source,
        )
