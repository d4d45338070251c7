"""The status page's HTML, rendered from the same ``StoreInfo`` documents ``GET /v1/stores`` answers.

Pure functions of their arguments: no I/O, every text from a store (names, errors, positions)
escaped. The stylesheet and the script are inlined by ``service.status_page``.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

# A broker silent for longer than this is worth a word on the page.
SILENT_BROKER_SECONDS = 60.0

_NOT_READY = "reads of it answer 503 store-not-ready until it is READY, and /readyz is 503 meanwhile"


@dataclasses.dataclass(frozen=True, slots=True)
class PageContext:
    """What the page needs besides the stores."""

    css: str
    script: str
    refresh_seconds: int
    now: datetime.datetime
    root_path: str = ""  # the prefix the service is served under (behind a proxy)
    base_url: str = ""  # the service's URL as the browser reached it (for the examples shown)
    tokens: bool = False  # auth.mode is tokens: offer to forget the token kept in the tab


def e(value: object) -> str:
    """``value`` as HTML text, quotes included (safe in attributes too)."""
    return escape(str(value), quote=True)


def format_count(value: float) -> str:
    return f"{value:,.0f}"


def format_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def format_duration(seconds: float) -> str:
    """``seconds`` in its two largest units: ``0.4 s``, ``12 s``, ``3 min 5 s``, ``2 h 10 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    first = next(i for i, (amount, _) in enumerate(parts) if amount)
    return " ".join(f"{amount} {unit}" for amount, unit in parts[first : first + 2] if amount)


def advice(info: Mapping[str, Any]) -> list[str]:
    """What the store's condition means for readers, and what to do about it, in a few sentences."""
    state = info.get("state")
    restore = info.get("restore") or {}
    contact = info.get("seconds_since_last_contact")
    said: list[str] = []
    if state == "FAILED":
        said.append(
            "The store could not start and serves nothing: fix what the error names, then restart the"
            " service. The other stores are not affected."
        )
    elif state == "STOPPED":
        said.append("The store is stopped: the service is shutting down.")
    elif info.get("stale"):
        said.append(
            "A rebuild from the topic is running: reads are answered from the last good copy (stale)"
            " until the new copy is READY, then it replaces the old one at once."
        )
    elif restore.get("mode") == "waiting":
        said.append(
            "Waiting for another store's bulk restore to end (engine.max_concurrent_bulk_restores);"
            f" {_NOT_READY}."
        )
    elif restore.get("mode") in {"compacting", "warming"}:
        said.append(
            "Every record is restored; the restored files are being merged and read into the block"
            f" cache, so that reads run at full speed from READY on: {_NOT_READY}."
        )
    elif state in {"CREATED", "RESTORING", "REBUILDING"}:
        said.append(f"The store is catching up with its topic: {_NOT_READY}.")
    serving = " Reads go on from the last applied state meanwhile." if state == "READY" else ""
    if info.get("last_error") and state != "FAILED":
        said.append(
            "Do what the error says: the store retries by itself, and the error clears once work begun"
            f" after it goes through.{serving} The log keeps the history;"
            " docs/how-to/operations.md lists each case."
        )
    elif isinstance(contact, int | float) and contact > SILENT_BROKER_SECONDS:
        said.append(
            f"No answer from the broker for {format_duration(contact)}: check the broker, the network and"
            f" the Kafka credentials; the store reconnects by itself.{serving}"
        )
    return said


def _link(context: PageContext, path: str, text: str) -> str:
    return f'<a href="{e(context.root_path + path)}">{e(text)}</a>'


def _restore(name: str, restore: Mapping[str, Any]) -> str:
    progress = float(restore.get("progress") or 0.0)
    applied, remaining = restore.get("records_applied", 0), restore.get("records_remaining", 0)
    eta = restore.get("eta_seconds")
    mode = restore.get("mode", "")
    if mode == "waiting":
        eta_text = "waiting for a bulk restore slot"
    elif mode == "compacting":
        eta_text = "merging the restored files before READY"
    elif mode == "warming":
        eta_text = "reading the table into the block cache before READY"
    elif eta is None:
        eta_text = "time left unknown yet"
    else:
        eta_text = f"about {format_duration(eta)} left"
    rate = restore.get("records_per_second") or 0
    return (
        '<div class="restore">'
        f'<progress max="1" value="{progress:.4f}" aria-label="restore of {e(name)}">'
        f"{progress:.0%}</progress>"
        f'<p><strong class="percent">{progress * 100:.1f} %</strong>'
        f" · {format_count(applied)} of {format_count(applied + remaining)} records"
        f' · {format_count(rate)} records/s · <span class="eta">{e(eta_text)}</span>'
        f' · <span class="muted">{e(mode)}, towards {e(restore.get("target", ""))}</span></p>'
        "</div>"
    )


def _problem(info: Mapping[str, Any]) -> str:
    said = advice(info)
    error = info.get("last_error")
    if error:
        lines = [f'<p class="error"><strong>Last error:</strong> {e(error)}</p>']
        lines += [f'<p class="advice"><strong>What to do:</strong> {e(text)}</p>' for text in said]
        return f'<div class="problem" role="alert">{"".join(lines)}</div>'
    if said:
        return f'<div class="note">{"".join(f"<p>{e(text)}</p>" for text in said)}</div>'
    return ""


def _fact(title: str, value_html: str, *, wide: bool = False) -> str:
    opening = '<div class="wide">' if wide else "<div>"
    return f"{opening}<dt>{e(title)}</dt><dd>{value_html}</dd></div>"


def _indexes(indexes: Mapping[str, Mapping[str, Any]]) -> str:
    items = []
    for name, index in indexes.items():
        state = index.get("state", "")
        rows = index.get("rows_indexed")
        detail = f", {format_count(rows)} rows indexed" if state != "ready" and rows is not None else ""
        field = e(index.get("field", ""))
        items.append(f"<li><code>{e(name)}</code> on <code>{field}</code>: {e(state)}{detail}</li>")
    return f"<ul>{''.join(items)}</ul>"


def _history(history: Mapping[str, Any]) -> str:
    kept = []
    if history.get("retention_ms"):
        kept.append(format_duration(history["retention_ms"] / 1000))
    if history.get("retention_offsets"):
        kept.append(f"{format_count(history['retention_offsets'])} offsets")
    floor = history.get("floor")
    start = f"as_of from <code>{e(floor)}</code>" if floor else "no version kept yet"
    return f"{start}; keeps {e(' or '.join(kept) or 'every version')}"


def _contact(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return '<span class="muted">none yet</span>'
    return f"{e(format_duration(seconds))} ago"


def _facts(info: Mapping[str, Any]) -> str:
    facts = []
    counted = info.get("counted_keys")
    if isinstance(counted, int):
        facts.append(_fact("Keys", format_count(counted)))  # exact, as of its count's position
    elif "approximate_num_keys" in info:
        facts.append(_fact("Keys (approx.)", f"~{format_count(info['approximate_num_keys'])}"))
    if "approximate_num_keys" in info:
        facts.append(_fact("Size on disk", e(format_bytes(info.get("size_on_disk_bytes", 0)))))
    facts.append(_fact("Lag", f"{format_count(info.get('total_lag', 0))} records"))
    facts.append(_fact("Last contact", _contact(info.get("seconds_since_last_contact"))))
    position = info.get("position") or ""
    shown = f"<code>{e(position)}</code>" if position else '<span class="muted">empty</span>'
    facts.append(_fact("Position", shown, wide=True))
    if info.get("indexes"):
        facts.append(_fact("Indexes", _indexes(info["indexes"]), wide=True))
    if info.get("history"):
        facts.append(_fact("History", _history(info["history"]), wide=True))
    return f'<dl class="facts">{"".join(facts)}</dl>'


def store_section(info: Mapping[str, Any], context: PageContext) -> str:
    """One store's card."""
    name = str(info.get("name", ""))
    state = str(info.get("state", ""))
    classes = "store has-error" if info.get("last_error") else "store"
    stale = ' <span class="stale">STALE</span>' if info.get("stale") else ""
    restore = info.get("restore")
    return (
        f'<section class="{classes}" id="store-{e(name)}" data-store="{e(name)}" data-state="{e(state)}">'
        "<header>"
        f"<h2>{_link(context, '/v1/stores/' + quote(name, safe=''), name)}</h2>"
        f'<span class="state state-{e(state.lower())}">{e(state)}</span>{stale}'
        "</header>"
        f'<p class="sub">topic <code>{e(info.get("topic", ""))}</code>'
        f" · {e(info.get('value_format', ''))}</p>"
        f"{_restore(name, restore) if restore else ''}"
        f"{_problem(info)}"
        f"{_facts(info)}"
        "</section>"
    )


def _summary(stores: Sequence[Mapping[str, Any]]) -> str:
    if not stores:
        return "no stores"
    ready = sum(1 for info in stores if info.get("state") == "READY")
    errors = sum(1 for info in stores if info.get("last_error"))
    if ready == len(stores):
        summary = f"all {len(stores)} READY" if len(stores) > 1 else "READY"
    else:
        summary = f"{ready} of {len(stores)} READY"
    return summary + (f", {errors} with an error" if errors else "")


def _document(context: PageContext, title: str, body: str, *, body_attributes: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{e(title)}</title>"
        f"<style>{context.css}</style>"
        f"<script>{context.script}</script>"
        f'<noscript><meta http-equiv="refresh" content="{context.refresh_seconds}"></noscript>'
        f"</head><body {body_attributes}>{body}</body></html>"
    )


def _navigation(context: PageContext) -> str:
    links = [
        _link(context, "/docs", "API docs"),
        _link(context, "/v1/stores", "JSON"),
        _link(context, "/metrics", "metrics"),
        _link(context, "/readyz", "readiness"),
    ]
    if context.tokens:
        links.append('<button type="button" class="forget" id="forget-token">Forget token</button>')
    return f"<nav>{''.join(links)}</nav>"


def render_status_page(stores: Sequence[Mapping[str, Any]], context: PageContext) -> str:
    """The whole page for ``stores`` (``StoreInfo`` documents, in display order)."""
    summary = _summary(stores)
    if stores:
        cards = "".join(store_section(info, context) for info in stores)
        main = f'<main class="stores">{cards}</main>'
    else:
        main = "<main><p>No store to show: none is configured, or this token may read none.</p></main>"
    updated = context.now.astimezone(datetime.UTC).strftime("%H:%M:%S UTC")
    body = (
        '<div class="top"><h1>statestore</h1>'
        f'<span class="summary">{e(summary)}</span>{_navigation(context)}</div>'
        f"{main}"
        f'<footer><span id="refreshed">updated {e(updated)},'
        f" refreshed every {context.refresh_seconds} s</span>"
        " · key counts marked ~ are RocksDB's estimates, the others counted</footer>"
    )
    return _document(
        context,
        f"statestore: {summary}",
        body,
        body_attributes=f'data-refresh="{context.refresh_seconds}" data-auth="ok"',
    )


def render_token_page(context: PageContext, *, rejected: bool) -> str:
    """The page a browser gets without a valid token when ``auth.mode`` is ``tokens``."""
    refusal = '<p class="rejected" role="alert">The token sent was not accepted.</p>' if rejected else ""
    body = (
        '<div class="top"><h1>statestore</h1>'
        f"<nav>{_link(context, '/docs', 'API docs')}</nav></div>"
        '<main class="token">'
        "<h2>A token is needed</h2>"
        f"{refusal}"
        "<p>This service requires a bearer token (<code>auth.mode: tokens</code>). Paste one to see the"
        " stores it may read. It is kept in this browser tab only and sent as"
        " <code>Authorization: Bearer</code>; it is never stored by the service.</p>"
        '<form id="token-form" autocomplete="off">'
        '<input name="token" type="password" required aria-label="bearer token" placeholder="bearer token">'
        '<button type="submit">Show the stores</button></form>'
        "<p class=\"muted\">Without a browser: <code>curl -H 'Authorization: Bearer $TOKEN'"
        f" {e(context.base_url)}/v1/stores</code></p>"
        "</main>"
    )
    # The page refreshes only once a token is given (the script skips refreshes while one is needed).
    attributes = f'data-refresh="{context.refresh_seconds}" data-auth="needed"'
    return _document(context, "statestore: a token is needed", body, body_attributes=attributes)
