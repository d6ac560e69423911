"""Model errors that retrying cannot fix (issue 13 item 10, paper §3.5).

The chat client (:class:`pgrag_dag.providers.llm.ModelClient`) and the litellm embedder
(:class:`pgrag_dag.providers.embedding.LiteLLMEmbedder`) retry a failed call until its wall-clock deadline —
right for rate limits, timeouts, dropped connections and 5xx answers, wrong for a request the provider
will refuse every time. :func:`refusal` tells them apart from the exception litellm raised:

=====================================================  ==========  ==========================================
litellm raised (or HTTP status)                        scope       what the one-line message says to fix
=====================================================  ==========  ==========================================
no credentials at all (the OpenAI SDK refuses before   ``model``   the provider's key variable (e.g.
any request; litellm reports it as a 500)                          ``OPENAI_API_KEY``) or
                                                                   ``<section>.api_key``
``AuthenticationError`` (401)                          ``model``   the key: ``<section>.api_key`` / variable
``PermissionDeniedError`` (403), 402 (payment)         ``model``   the key's access to the model, the account
``NotFoundError`` (404), unknown provider              ``model``   the model name (``llm.models`` /
                                                                   ``embedding.model``) and ``api_base``
``BadRequestError`` (400), 422 (malformed request,     ``request`` nothing to retry: this request is refused
context window, content policy, unsupported params)
``RateLimitError`` (429), ``Timeout``, connection,     —           retried within the deadline (``None``)
``InternalServerError`` / 5xx
=====================================================  ==========  ==========================================

A ``model`` refusal means every call of that model in this configuration will fail: the chat client
remembers it and calls that model no more (:class:`~pgrag_dag.errors.ModelAccessError`). A ``request``
refusal fails that one call at once (:class:`~pgrag_dag.errors.ModelError`); the next model of the
failover list, or the next request, is still tried.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from pgrag_dag.store.db import one_line

log = logging.getLogger(__name__)

Scope = Literal["model", "request"]
Kind = Literal["chat", "embedding"]

_SECTION = {"chat": ("llm", "llm.models"), "embedding": ("embedding", "embedding.model")}


@dataclass(frozen=True)
class Refusal:
    """An error retrying cannot fix: its ``scope`` (see the module docstring) and the ``message``, one
    line naming the model and the setting or environment variable to fix, ending ``not retried``."""

    scope: Scope
    message: str


def refusal(
    exc: BaseException, *, model: str, kind: Kind, api_key_set: bool, api_base: str | None
) -> Refusal | None:
    """Classify ``exc``, raised by a litellm call of ``model`` (a ``chat`` or ``embedding`` model whose
    settings give an API key when ``api_key_set``, and ``api_base``): the :class:`Refusal` when retrying
    cannot help, ``None`` when it may (rate limit, timeout, connection, server error)."""
    import litellm
    import openai

    section, model_setting = _SECTION[kind]
    who = f"{kind} model {model}"
    said = _provider_message(exc)
    status = getattr(exc, "status_code", None)
    if any(type(e) is openai.OpenAIError for e in _causes(exc)):  # the SDK's own refusal: no request was sent
        if "api_key" in str(exc) or "credentials" in str(exc).lower():
            return Refusal(
                "model", f"{who}: no API key — {_key_hint(model, section, api_key_set)}; not retried"
            )
        return Refusal(
            "model",
            f"{who}: the provider's client refused its configuration ({said}) — check "
            f"{section}.api_base and {section}.api_key; not retried",
        )
    if isinstance(exc, (litellm.RateLimitError, litellm.Timeout, litellm.APIConnectionError)):
        return None
    if isinstance(exc, litellm.AuthenticationError) or status == 401:
        return Refusal(
            "model",
            f"{who}: the provider refused the credentials ({said}) — "
            f"{_key_hint(model, section, api_key_set)}; not retried",
        )
    if isinstance(exc, litellm.PermissionDeniedError) or status in (402, 403):
        return Refusal(
            "model",
            f"{who}: the provider denied access ({said}) — the key in "
            f"{_key_setting(section)} (or the provider's key variable) has no access to this "
            "model or its account is out of credit; not retried",
        )
    if _unknown_provider(exc):
        return Refusal(
            "model",
            f"{who}: litellm knows no provider for this name ({said}) — write {model_setting} "
            "as provider/model, e.g. openai/gpt-4o-mini; not retried",
        )
    if isinstance(exc, litellm.NotFoundError) or status == 404:
        where = f" at {section}.api_base {api_base}" if api_base else ""
        return Refusal(
            "model",
            f"{who}: unknown model or endpoint{where} ({said}) — check {model_setting}"
            f"{' and ' + section + '.api_base' if api_base else ''}; not retried",
        )
    if isinstance(exc, (litellm.BadRequestError, litellm.UnprocessableEntityError)) or status in (400, 422):
        return Refusal("request", f"{who} refused the request as invalid ({said}); not retried")
    return None


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during, outermost first."""
    chain: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in chain and len(chain) < 10:
        chain.append(cur)
        cur = cur.__cause__ or cur.__context__
    return chain


def _provider_message(exc: BaseException) -> str:
    """The provider's own words, without litellm's class-name prefixes, on one line (≤ 200 characters)."""
    text = one_line(exc, limit=400)
    for _ in range(3):
        head, sep, rest = text.partition(": ")
        if sep and (head.startswith("litellm.") or head.endswith(("Error", "Exception"))) and " " not in head:
            text = rest
    head, sep, rest = text.partition(" - ")
    if sep and head.endswith("Exception") and " " not in head:
        text = rest
    status = getattr(exc, "status_code", None)
    text = text if len(text) <= 200 else text[:199] + "…"
    return f"HTTP {status}: {text}" if isinstance(status, int) and str(status) not in text[:20] else text


def _unknown_provider(exc: BaseException) -> bool:
    import litellm

    unknown = getattr(litellm.exceptions, "LiteLLMUnknownProvider", ())
    return (bool(unknown) and isinstance(exc, unknown)) or "LLM Provider NOT provided" in str(exc)


def _key_setting(section: str) -> str:
    return f"{section}.api_key (PGRAG_{section.upper()}__API_KEY)"


def _key_hint(model: str, section: str, api_key_set: bool) -> str:
    """What to set: the configured key when there is one, else the variables litellm reads for the
    model's provider (``validate_environment``, which reads only the environment)."""
    if api_key_set:
        return f"check {_key_setting(section)}"
    missing = _missing_keys(model)
    if missing:
        return f"set {' and '.join(missing)} or {_key_setting(section)}"
    return f"check the provider's key variable in the environment, or set {_key_setting(section)}"


def _missing_keys(model: str) -> list[str]:
    import litellm

    try:
        found: Any = litellm.validate_environment(model=model)
    except Exception as exc:  # a provider litellm cannot check: the hint names the setting only
        log.debug("validate_environment(%s) failed: %s", model, exc)
        return []
    return [str(k) for k in (found or {}).get("missing_keys", [])]
