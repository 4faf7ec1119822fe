"""The one pulsar-client ``Client`` of a gateway process, owned by trio code.

``pulsar.Client`` (the public wrapper) builds the C++ client from our options; after that we
talk to its C extension object (``_pulsar.Client``) directly, like ``pulsar.asyncio`` does,
because that is where the non-blocking ``*_async`` calls are. Nothing here blocks the trio
thread: building the client runs in a worker thread, and create/subscribe/close use the C++
asynchronous calls with :class:`~gateway.pulsar.bridge.NativeCall`.

Threads (C++): ``io_threads`` run the network I/O and fire send/ack callbacks;
``message_listener_threads`` run message listeners. Every Python callback needs the GIL, so
more threads buy nothing on a gateway process that runs one trio loop per core: the default is
one of each.

Create the client after ``fork()`` (the C++ threads do not survive a fork).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import trio

from gateway.pulsar.bridge import NativeCall
from gateway.pulsar.closing import AsyncClosing
from gateway.pulsar.errors import ClosedError
from gateway.pulsar.native_objects import binding_client

if TYPE_CHECKING:
    from gateway.pulsar.consumer import ConsumerOptions, TrioConsumer
    from gateway.pulsar.producer import ProducerOptions, TrioProducer

LogLevel = Literal["debug", "info", "warn", "error"]

# Extra seconds on top of operation_timeout_seconds before we stop waiting for a C++ callback
# ourselves: the C++ client enforces the operation timeout, this only guards against a callback
# that never comes.
_GUARD_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class ClientOptions:
    service_url: str = "pulsar://127.0.0.1:6650"
    # JWT for AuthenticationToken. For other schemes pass a pulsar.Authentication instance.
    auth_token: str | None = None
    authentication: Any = None
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_validate_hostname: bool = False
    # The client certificate (PEM files). With auth_tls it is also the identity: the broker's
    # AuthenticationProviderTls takes the role from its CN (AuthenticationTls).
    tls_certificate_file_path: str | None = None
    tls_private_key_file_path: str | None = None
    auth_tls: bool = False
    operation_timeout_seconds: int = 30
    connection_timeout_ms: int = 10_000
    io_threads: int = 1
    message_listener_threads: int = 1
    # The C++ client logs to stderr; "warn" keeps connection churn out of the gateway's logs.
    log_level: LogLevel = "warn"
    # The C++ client's own periodic stats logging; off (the gateway exports its own metrics).
    stats_interval_in_seconds: int = 0
    # Producers and consumers use the compiled module when it is built (compiled.py), unless
    # their own options say not to.
    compiled: bool = True


def build_native_client(options: ClientOptions) -> Any:
    """A new ``pulsar.Client`` made as ``options`` say (blocking: the C++ client starts its
    threads). PulsarClient.create wraps one; the rollup's Pulsar source uses one as is."""
    import pulsar

    level = {
        "debug": pulsar.LoggerLevel.Debug,
        "info": pulsar.LoggerLevel.Info,
        "warn": pulsar.LoggerLevel.Warn,
        "error": pulsar.LoggerLevel.Error,
    }[options.log_level]
    auth = options.authentication
    if auth is None and options.auth_token:
        auth = pulsar.AuthenticationToken(options.auth_token)
    if auth is None and options.auth_tls:
        if not (options.tls_certificate_file_path and options.tls_private_key_file_path):
            raise ValueError(
                "auth_tls needs tls_certificate_file_path and tls_private_key_file_path"
            )
        auth = pulsar.AuthenticationTLS(
            options.tls_certificate_file_path, options.tls_private_key_file_path
        )
    return pulsar.Client(
        options.service_url,
        authentication=auth,
        operation_timeout_seconds=options.operation_timeout_seconds,
        connection_timeout_ms=options.connection_timeout_ms,
        io_threads=options.io_threads,
        message_listener_threads=options.message_listener_threads,
        stats_interval_in_seconds=options.stats_interval_in_seconds,
        tls_trust_certs_file_path=options.tls_trust_certs_file_path,
        tls_allow_insecure_connection=options.tls_allow_insecure_connection,
        tls_validate_hostname=options.tls_validate_hostname,
        tls_certificate_file_path=options.tls_certificate_file_path,
        tls_private_key_file_path=options.tls_private_key_file_path,
        logger=pulsar.ConsoleLogger(level),
    )


class PulsarClient(AsyncClosing):
    """Owns one pulsar-client Client; creates :class:`TrioProducer` and :class:`TrioConsumer`.

    Must be created inside the trio run that will use it (it captures the run's token: every
    C++ callback is delivered to that run).
    """

    def __init__(self, wrapper: Any, options: ClientOptions) -> None:
        self.options = options
        self._wrapper = wrapper  # pulsar.Client: keeps the C++ client and its config alive
        self._native = binding_client(wrapper)  # _pulsar.Client
        self._token = trio.lowlevel.current_trio_token()
        self._closed = False
        self._children: set[TrioProducer | TrioConsumer] = set()

    @classmethod
    async def create(cls, options: ClientOptions | None = None) -> PulsarClient:
        options = options or ClientOptions()
        # Builds the C++ client and starts its threads: quick, but not ours to run on trio.
        wrapper = await trio.to_thread.run_sync(build_native_client, options)
        return cls(wrapper, options)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def token(self) -> trio.lowlevel.TrioToken:
        return self._token

    @property
    def wrapper(self) -> Any:
        """The ``pulsar.Client`` (its high-level API, e.g. schema producers)."""
        return self._wrapper

    def open_counts(self) -> tuple[int, int]:
        """(producers, consumers) open on this client (metrics)."""
        from gateway.pulsar.producer import TrioProducer

        producers = sum(1 for child in self._children if isinstance(child, TrioProducer))
        return producers, len(self._children) - producers

    @property
    def native(self) -> Any:
        """The ``_pulsar.Client`` (escape hatch for benchmarks and tests)."""
        return self._native

    @property
    def operation_deadline(self) -> float:
        """Seconds after which we stop waiting for a create/subscribe/close callback."""
        return self.options.operation_timeout_seconds + _GUARD_SECONDS

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("pulsar client closed")

    def adopt(self, child: TrioProducer | TrioConsumer) -> None:
        """Track ``child`` (a producer or consumer just created on this client) until it
        closes: ``aclose`` marks every one still tracked closed."""
        self._children.add(child)

    def forget(self, child: TrioProducer | TrioConsumer) -> None:
        """Stop tracking ``child``: it is closing on its own."""
        self._children.discard(child)

    async def create_producer(
        self, topic: str, options: ProducerOptions | None = None
    ) -> TrioProducer:
        from gateway.pulsar.producer import ProducerOptions, create_producer

        self._check_open()
        return await create_producer(self, topic, options or ProducerOptions())

    async def subscribe(
        self,
        topics: str | Sequence[str],
        subscription: str,
        options: ConsumerOptions | None = None,
    ) -> TrioConsumer:
        """Subscribe to one topic, or to several with one subscription name (see consumer.py)."""
        from gateway.pulsar.consumer import ConsumerOptions, subscribe

        self._check_open()
        return await subscribe(self, topics, subscription, options or ConsumerOptions())

    async def aclose(self) -> None:
        """Close every producer and consumer, then the client. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for child in list(self._children):
            child.mark_closed()
        self._children.clear()
        call: NativeCall[None] = NativeCall("close client", token=self._token)
        self._native.close_async(call.result_callback)
        try:
            with trio.CancelScope(shield=True):
                await call.wait(self.operation_deadline)
        except ClosedError:
            pass
        finally:
            # The C++ destructor joins the client's threads: let a worker thread drop the last
            # reference and pay for it.
            holder = [self._wrapper]
            self._wrapper = self._native = None
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(holder.clear)


@asynccontextmanager
async def open_client(options: ClientOptions | None = None) -> AsyncIterator[PulsarClient]:
    client = await PulsarClient.create(options)
    try:
        yield client
    finally:
        await client.aclose()
