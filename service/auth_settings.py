"""Who may read what: bearer tokens (inline or from a file) and client certificates."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from service.exceptions import ConfigError

ALL_STORES = "*"


class TokenSettings(BaseModel):
    """One bearer token, stored as the hex SHA-256 of the token, and the stores it may read.

    ``stores`` lists store names, or is ``["*"]`` for every store, present and future. Reading
    everything must be asked for: a token with no ``stores`` is a configuration error, not a
    token that reads everything by omission.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, description="a name for the token, shown in logs and metrics (never the token)"
    )
    sha256: str = Field(
        pattern=r"^[0-9a-fA-F]{64}$",
        description="hex SHA-256 of the bearer token (the token itself is never configured)",
    )
    stores: list[str] = Field(description='the stores the token may read, or `["*"]` for every store')

    @field_validator("sha256")
    @classmethod
    def _lower(cls, digest: str) -> str:
        return digest.lower()

    @model_validator(mode="after")
    def _explicit_stores(self) -> TokenSettings:
        if not self.stores:
            raise ValueError(
                f"auth token {self.name!r} names no stores: list the stores it may read,"
                f' or stores: ["{ALL_STORES}"] for every store'
            )
        if ALL_STORES in self.stores and len(self.stores) > 1:
            raise ValueError(
                f'auth token {self.name!r} lists "{ALL_STORES}" with other stores:'
                f' use ["{ALL_STORES}"] alone for every store, or only names'
            )
        return self

    @property
    def reads_every_store(self) -> bool:
        return self.stores == [ALL_STORES]


class CertificateSettings(BaseModel):
    """Clients presenting a verified certificate (see ``http.tls.client_ca``) named ``common_name``,
    as its subject's CN or one of its DNS subject alternative names, and the stores they may read
    (as a token's ``stores``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="who the certificate is, in logs and the access log")
    common_name: str = Field(
        min_length=1, description="the verified certificate's subject CN or one of its DNS names"
    )
    stores: list[str] = Field(description='the stores it may read, or ["*"] for every store')

    @model_validator(mode="after")
    def _explicit_stores(self) -> CertificateSettings:
        _check_stores(f"auth certificate {self.name!r}", self.stores)
        return self

    @property
    def reads_every_store(self) -> bool:
        return self.stores == [ALL_STORES]


def _check_stores(what: str, stores: list[str]) -> None:
    if not stores:
        raise ValueError(
            f"{what} names no stores: list the stores it may read,"
            f' or stores: ["{ALL_STORES}"] for every store'
        )
    if ALL_STORES in stores and len(stores) > 1:
        raise ValueError(
            f'{what} lists "{ALL_STORES}" with other stores: use ["{ALL_STORES}"] alone for every store,'
            " or only names"
        )


class AuthSettings(BaseModel):
    """``open`` serves everyone (local development only); ``tokens`` requires a bearer token or a
    client certificate named in ``certificates``."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["open", "tokens"] = Field(
        default="open",
        description=(
            "`open` serves everyone (local development only); `tokens` requires a bearer token or a client "
            "certificate"
        ),
    )
    tokens: list[TokenSettings] = Field(
        default_factory=list,
        description="the bearer tokens and the stores each may read (with `mode: tokens`)",
    )
    tokens_file: Path | None = Field(
        default=None,
        description="a YAML (or JSON) file of more tokens, shaped as `tokens`; read again when it changes",
    )
    reload_interval_seconds: float = Field(
        default=10.0, gt=0, description="how often `tokens_file` is checked for changes"
    )
    certificates: list[CertificateSettings] = Field(
        default_factory=list,
        description="verified client certificates (by subject CN or DNS name) and the stores each may read",
    )
    metrics: Literal["open", "token"] = Field(
        default="open",
        description=(
            "``token``: /metrics needs a bearer token too (any configured one); probes always stay open."
        ),
    )

    @model_validator(mode="after")
    def _tokens_when_needed(self) -> AuthSettings:
        if self.mode == "tokens" and not (self.tokens or self.tokens_file or self.certificates):
            raise ValueError(
                "auth.mode is 'tokens' but auth.tokens, auth.tokens_file and auth.certificates are empty:"
                " list at least one token or certificate"
            )
        names = [c.common_name for c in self.certificates]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(
                f"auth.certificates: common_name {', '.join(map(repr, repeated))} is listed more than once;"
                " one name must mean one set of stores"
            )
        if self.metrics == "token" and self.mode != "tokens":
            raise ValueError("auth.metrics is 'token' but auth.mode is 'open': set auth.mode to 'tokens'")
        _refuse_ambiguous_tokens(self.tokens)
        return self


def _refuse_ambiguous_tokens(tokens: list[TokenSettings]) -> None:
    """Refuse two entries for one token (same digest) or one name for two tokens.

    Either would make one credential mean two things: a token would get the stores of whichever
    entry is looked up, and a name in the logs and metrics would stand for two clients.
    """
    for field, what, advice in (
        ("sha256", "the same sha256 (one token)", "give each entry a token of its own, or merge them"),
        ("name", "the same name", "give each token a name of its own"),
    ):
        first: dict[str, int] = {}
        for position, token in enumerate(tokens):
            value = getattr(token, field)
            if value in first:
                earlier = first[value]
                raise ValueError(
                    f"auth.tokens[{earlier}] ({tokens[earlier].name!r}) and auth.tokens[{position}]"
                    f" ({token.name!r}) have {what}, so one credential would mean two things: {advice}"
                )
            first[value] = position


def load_tokens_file(path: Path, stores: list[str] | None = None) -> list[TokenSettings]:
    """The tokens of ``auth.tokens_file`` (a YAML or JSON list shaped as ``auth.tokens``); ``stores``,
    when given, are the configured store names the tokens may name. Raises ``ConfigError``."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"auth.tokens_file: cannot read {path}: {exc}") from exc
    if not isinstance(raw, list):
        raise ConfigError(
            f"auth.tokens_file: {path} must hold a list of tokens (name, sha256, stores), as auth.tokens"
        )
    try:
        tokens = [TokenSettings.model_validate(entry) for entry in raw]
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(entry)'}: {error['msg']}" for error in exc.errors()
        )
        raise ConfigError(f"auth.tokens_file: {path} holds an invalid token: {problems}") from exc
    for token in tokens:
        unknown = [] if stores is None or token.reads_every_store else sorted(set(token.stores) - set(stores))
        if unknown:
            raise ConfigError(
                f"auth.tokens_file: token {token.name!r} in {path} names unknown stores: {', '.join(unknown)}"
            )
    return tokens
