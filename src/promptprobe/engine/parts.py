"""What a run calls, built once before any call is made: a provider per model (and its batch
API with --batch), the retriever, the message assembler, the checks, and one rate limiter per
endpoint. Building them checks every key and imports all production code, so a missing key or a
broken function stops the run before anything is created."""

import os
import threading
from typing import Any

from ..assemble import Assembler, default_messages, production_assembler
from ..checks import CheckSettings, build_checks, close_checks
from ..config import TargetConfig
from ..models import ModelSpec
from ..providers import make_provider
from ..providers.base import Provider
from ..retrievers import Retriever, make_retriever
from .executor import Executor
from .limiter import Limiter
from .records import SampleRecords
from .retrieval import Retrieval
from .retry import RetryPolicy
from .store import RunStore

# Seconds a model endpoint gets to accept a connection before the run starts.
CONNECT_CHECK_SECONDS = 3.0
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy", "all_proxy")


class RunParts:
    """The run's providers, batch APIs, retriever, assembler, checks and limiters."""

    def __init__(
        self,
        models: list[ModelSpec],
        config: TargetConfig,
        settings: CheckSettings,
        options: Any,  # RunOptions
        judge_models: list[ModelSpec] | None = None,  # the judged checks' models (engine/judging.py)
    ) -> None:
        self.retriever: Retriever | None = None
        self.checks: list[Any] = []
        # A judge on an arm's model spec shares its provider; the others get their own.
        models = list(models) + [m for m in judge_models or [] if m.spec not in {x.spec for x in models}]
        self.providers: dict[str, Provider] = {m.spec: make_provider(m, options.params) for m in models}
        try:
            # A model without a batch API is refused now, before anything is created.
            self.batch_apis = (
                {spec: provider.batch_api() for spec, provider in self.providers.items()}
                if options.batch
                else {}
            )
            self.retriever = make_retriever(config.retrieval, config.base_dir)
            self.assemble: Assembler = (
                production_assembler(config.assemble_function)
                if config.assemble_function
                else default_messages
            )
            self.checks = build_checks(settings)
        except BaseException:
            self.close()
            raise
        shared: dict[str, Limiter] = {}
        self.limiters = {
            m.spec: shared.setdefault(
                endpoint(m), Limiter(options.rpm, sleep=options.sleep, max_wait=options.max_retry_wait)
            )
            for m in models
        }

    def retrieval(self, store: RunStore | None, policy: RetryPolicy, cancel: threading.Event) -> Retrieval:
        assert self.retriever is not None
        return Retrieval(store, self.retriever, policy, cancel)

    def records(self, store: RunStore, settings: CheckSettings, variables: dict[str, str]) -> SampleRecords:
        return SampleRecords(store, self.assemble, self.checks, settings, variables)

    def executor(self, records: SampleRecords, policy: RetryPolicy, cancel: threading.Event) -> Executor:
        return Executor(records, self.providers, self.limiters, policy, cancel)

    def unreachable(self) -> dict[str, str]:
        return unreachable_endpoints(self.providers)

    def close(self) -> None:
        close_checks(self.checks)  # your own checks' worker processes
        if self.retriever is not None:
            self.retriever.close()
        for provider in self.providers.values():
            provider.close()


def unreachable_endpoints(providers: dict[str, Provider]) -> dict[str, str]:
    """The models whose endpoint refuses a TCP connection (or whose host does not resolve), with
    why; no API call is made. Skipped behind a proxy, where only the proxy can be reached."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(8, len(providers) or 1)) as pool:
        results = list(pool.map(lambda item: (item[0], refusal(*item)), providers.items()))
    return {spec: reason for spec, reason in results if reason}


def refusal(spec: str, provider: Provider) -> str | None:
    """Why the model's endpoint refuses a TCP connection; None when it accepts one or when that
    cannot be told (behind a proxy, or no address)."""
    address = provider.address()
    if address is None or behind_proxy():
        return None
    import socket

    try:
        socket.create_connection(address, timeout=CONNECT_CHECK_SECONDS).close()
    except OSError as exc:
        host, port = address
        return f"model {spec}: cannot connect to {host}:{port} ({exc.strerror or exc})"
    return None


def accepts_connections(provider: Provider) -> bool:
    """Whether the model's endpoint is known to accept a TCP connection now (False when it
    refuses, and when that cannot be told)."""
    if provider.address() is None or behind_proxy():
        return False
    return refusal(provider.spec.spec, provider) is None


def behind_proxy() -> bool:
    return any(os.environ.get(name) for name in PROXY_VARIABLES)


def endpoint(spec: ModelSpec) -> str:
    """Models behind one endpoint share its rate limits."""
    return f"{spec.provider}@{spec.base_url or 'default'}"
