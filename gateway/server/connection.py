"""One client connection: a reader, a single writer and a heartbeat timer in one nursery.

The sans-IO ``ServerConnection`` decides what every byte means; this module only moves bytes
and time in and out of it. Back-pressure: the writer is fed through a bounded memory channel,
so when a client stops reading, ``_flush`` blocks and the reader stops reading too, instead of
buffering without bound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
import ssl
import time

import trio

from gateway.amqp import events as ev
from gateway.amqp.connection import ConnectionState, ServerConnection
from gateway.amqp.errors import AMQPError
from gateway.amqp.proxy_protocol import FIXED_SIZE, Command, ProxyHeaderError, ProxyHeaderReader
from gateway.auth.authenticator import AuthenticationFailed, Authenticator, PeerIdentity
from gateway.auth.throttle import FailureThrottle
from gateway.auth.tls_identity import common_name
from gateway.backend.interface import Backend, Owner
from gateway.observability.counters import COUNTERS, VhostCounters
from gateway.server.channel_state import Consumer
from gateway.server.session import AMQPSession
from gateway.server.settings import ServerSettings
from gateway.server.socket_write import write_now

log = logging.getLogger("gateway.connection")

READ_SIZE = 65536
# At most this many queued chunks are joined into one write.
WRITE_BATCH = 256

# Connection ids are unique across the fleet: exclusive queues are owned by one of them.
_ids = itertools.count(1)
_PROCESS_TAG = f"{os.uname().nodename}-{os.getpid()}"


class ClientConnection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        settings: ServerSettings,
        authenticator: Authenticator,
        backend: Backend,
        peer: PeerIdentity,
        *,
        throttle: FailureThrottle | None = None,
        proxy_header: bool = False,
    ) -> None:
        """``stream`` may be a ``trio.SSLStream`` not yet shaken hands (amqps listeners): the
        TLS handshake then runs first, under the same handshake deadline as the AMQP one.
        ``throttle``: delays refusing repeated login failures from one address.
        ``proxy_header``: the peer is a trusted proxy, so the connection starts with a PROXY
        protocol v2 header (before TLS) naming the real client, who becomes ``peer``."""
        self._stream = stream
        self._throttle = throttle
        self._settings = settings
        self._authenticator = authenticator
        self._backend = backend
        self._session: AMQPSession | None = None
        self.peer = peer
        self.id = f"{_PROCESS_TAG}-{next(_ids)}"
        self.owner = Owner(self.id, "")
        self.nursery: trio.Nursery
        self.protocol = ServerConnection(settings.connection, trio.current_time())
        self.user: str | None = None
        self.vhost: str | None = None
        self.opened = False
        # What the management API shows of the connection (gateway/server/connection_info.py).
        self.connected_at_ms = int(time.time() * 1000)
        self.mechanism = ""
        self.local_address = _local_address(stream)
        self.tls = isinstance(stream, trio.SSLStream)
        # Why the connection ended, for the close log line; the first reason recorded wins.
        self.close_reason: str | None = None
        self.finished = trio.Event()
        self._outbox, self._outbox_reader = trio.open_memory_channel[bytes](
            settings.write_queue_depth
        )
        # Chunks put in the outbox and not yet written by the writer: while there are any, a
        # flush queues behind them instead of writing at once (socket_write.py), so the client
        # gets the bytes in the order they were made.
        self._unwritten = 0
        # Wraps the reader: its deadline is the handshake timeout, and cancelling it ends the
        # connection from another task (the timer, when the peer stopped sending heartbeats).
        self._reader_scope = trio.CancelScope()
        self._tls_pending = isinstance(stream, trio.SSLStream)
        self._proxy_pending = proxy_header
        # A PROXY LOCAL header: the proxy itself connected (a health check), nobody relayed.
        self._proxy_local = False
        self._close_deadline_set = False
        # The writer sent everything queued and ended because the outbox closed.
        self._written_out = False
        self._timer_rearmed = trio.Event()
        self._timer_deadline: float | None = None
        # The reader is handling what it read (a method may be waiting on Pulsar or
        # ZooKeeper) rather than reading: the heartbeat timer must not blame the client.
        self._handling = False
        # Set once the vhost is open: its counters count this connection until it ends.
        self._counts: VhostCounters | None = None
        COUNTERS.connections_opened += 1

    # ----------------------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._write_loop, nursery.cancel_scope)
                nursery.start_soon(self._timer_loop)
                await self._read_loop()
                # Whatever the core queued last (Close-Ok, Close, our protocol header) must
                # reach the client before the socket closes; the writer then ends the nursery.
                await self.flush()
                await self._outbox.aclose()
                with trio.move_on_after(self._settings.close_timeout):
                    await trio.sleep_forever()
                nursery.cancel_scope.cancel()
            if self.protocol.peer_closes_socket and self._written_out:
                await self._linger()
        finally:
            await self._close_session()
            await trio.aclose_forcefully(self._stream)
            COUNTERS.connections_closed += 1
            if self._counts is not None:
                self._counts.connection_closed()
                self._counts = None
            self._log_closed()
            self.finished.set()

    async def _linger(self) -> None:
        """After our Connection.Close-Ok: read and discard until the client closes the socket.

        Close-Ok tells the client that it is safe to close the socket (AMQP 0-9-1,
        connection.close-ok), so the socket is the client's to close. A client may still be
        writing what it queued before its Close (amqplib's publishes under back-pressure);
        closing our end with those bytes unread makes the kernel answer with a reset, and the
        client's next read fails with ECONNRESET before it has read the Close-Ok. RabbitMQ
        keeps reading and discarding in its ``closed`` state until the client closes
        (rabbit_reader: ``handle_frame`` when stopping, ``close_connection``'s
        ``terminate_connection`` timer). amqpConnectionCloseTimeout bounds the wait, so that
        a client that never closes cannot hold the connection.
        """
        with trio.move_on_after(self._settings.close_timeout):
            try:
                while data := await self._stream.receive_some(READ_SIZE):
                    COUNTERS.incoming_bytes += len(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    def consumers(self) -> list[tuple[int, Consumer]]:
        """(channel number, consumer) of this connection's consumers (management API)."""
        return [] if self._session is None else self._session.consumers()

    async def request_close(self, error: AMQPError) -> None:
        """Server-initiated Connection.Close (e.g. 320 on shutdown); Close-Ok ends it."""
        if self.protocol.is_closed:
            return
        self._record_reason(f"closed by server: {error.reply_code} {error.reply_text}")
        self.protocol.close_connection(error)
        await self.flush()

    # ----------------------------------------------------------------------------- tasks

    async def _read_loop(self) -> None:
        self._reader_scope.deadline = trio.current_time() + self._settings.handshake_timeout
        with self._reader_scope:
            if self._proxy_pending and not await self._read_proxy_header():
                return
            if self._tls_pending and not await self._tls_handshake():
                return
            while not self.protocol.is_closed:
                try:
                    # bytes() is free for the bytes a socket returns; memory streams may
                    # hand out a bytearray, which the core does not take.
                    data = bytes(await self._stream.receive_some(READ_SIZE))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                COUNTERS.incoming_bytes += len(data)
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "recv %s %d bytes %r",
                        self.peer.address,
                        len(data),
                        data[: self._settings.debug_binary_length],
                    )
                events = self.protocol.receive_data(data, trio.current_time())
                self._handling = True
                try:
                    await self._handle_events(events)
                finally:
                    self._handling = False
                await self.flush()
                self._rearm_timer()
                if not data:
                    self._record_reason("client closed the socket")
                    return
        if self._reader_scope.cancelled_caught and not self.opened:
            if self._proxy_pending:
                self._record_reason("no complete PROXY protocol header in time")
            tls = "TLS " if self._tls_pending else ""
            self._record_reason(f"{tls}handshake not completed in time")

    async def _read_proxy_header(self) -> bool:
        """Read the PROXY v2 header a trusted proxy sends first; False (reason recorded) if
        there is none. Reads exactly the header's bytes, so the client's first bytes (AMQP,
        or a TLS client hello) stay in the socket for what comes next."""
        transport = (
            self._stream.transport_stream
            if isinstance(self._stream, trio.SSLStream)
            else self._stream
        )
        reader = ProxyHeaderReader()
        while (needed := reader.bytes_needed()) > 0:
            try:
                data = bytes(await transport.receive_some(needed))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                if reader.bytes_needed() == FIXED_SIZE:
                    # Connected and closed without a byte: a load balancer's TCP health check
                    # (HAProxy's `check`), which would otherwise fill the log at INFO.
                    self._proxy_local = True
                    self._record_reason("closed without sending anything (a health check)")
                else:
                    self._record_reason("peer closed the socket inside its PROXY protocol header")
                return False
            try:
                reader.feed(data)
            except ProxyHeaderError as error:
                # One log line, as for a bad AMQP protocol header; nothing is sent back (the
                # peer is a proxy that did not speak the protocol it was trusted for).
                self._record_reason(
                    f"refused: bad PROXY protocol header from a trusted peer: {error}"
                )
                return False
        header = reader.header
        assert header is not None  # bytes_needed() is 0 only once the header is complete
        self._proxy_pending = False
        if header.command is Command.LOCAL:
            self._proxy_local = True
        elif header.source_address is not None:
            log.debug("PROXY header: %s is relaying %s", self.peer.address, header.source_address)
            self.peer = dataclasses.replace(self.peer, address=header.source_address)
        return True

    async def _tls_handshake(self) -> bool:
        """Shake hands on an amqps connection; False (reason recorded) when it fails.

        Plaintext AMQP on a TLS port, an untrusted or missing client certificate, a version or
        cipher mismatch: all end here as one reason for the close log line, never a traceback.
        """
        assert isinstance(self._stream, trio.SSLStream)
        try:
            await self._stream.do_handshake()
        except (trio.BrokenResourceError, trio.ClosedResourceError) as error:
            self._record_reason(f"TLS handshake failed: {_tls_failure(error)}")
            return False
        self._tls_pending = False
        # getpeercert() is empty unless the client's certificate verified against our CAs.
        name = common_name(self._stream.getpeercert())
        self.peer = dataclasses.replace(self.peer, tls_common_name=name)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "TLS peer=%s version=%s cipher=%s client-cn=%s",
                self.peer.address,
                self._stream.version(),
                (self._stream.cipher() or ("?",))[0],
                name,
            )
        return True

    async def _write_loop(self, scope: trio.CancelScope) -> None:
        try:
            async for chunk in self._outbox_reader:
                # Everything already queued goes out in one write: a burst of deliveries is
                # one system call, not one per message.
                chunks = [chunk]
                with contextlib.suppress(trio.WouldBlock, trio.EndOfChannel):
                    while len(chunks) < WRITE_BATCH:
                        chunks.append(self._outbox_reader.receive_nowait())
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                await self._stream.send_all(data)
                self._unwritten -= len(chunks)
                COUNTERS.outgoing_bytes += len(data)
            self._written_out = True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._record_reason("client stopped reading (socket broken)")
        finally:
            # The writer ending means nothing more can reach the client: end the connection,
            # and let nobody wait for room in the outbox any more (flush's shielded wait).
            self._outbox_reader.close()
            scope.cancel()

    async def _timer_loop(self) -> None:
        while True:
            self._timer_deadline = self.protocol.next_deadline()
            with trio.move_on_at(
                math.inf if self._timer_deadline is None else self._timer_deadline
            ) as scope:
                await self._timer_rearmed.wait()
                self._timer_rearmed = trio.Event()
            if scope.cancelled_caught:
                if self._handling:  # the reader waits on a method: nothing was read since
                    self.protocol.not_reading(trio.current_time())
                await self._handle_events(self.protocol.handle_timer(trio.current_time()))
                await self.flush()
                if self.protocol.is_closed:
                    self._reader_scope.cancel()
                    return

    def _rearm_timer(self) -> None:
        """Wake the timer only if it now has to fire earlier than it planned to."""
        deadline = self.protocol.next_deadline()
        if deadline is not None and (
            self._timer_deadline is None or deadline < self._timer_deadline
        ):
            self._timer_rearmed.set()

    async def flush(self) -> None:
        if self.protocol.state is ConnectionState.CLOSING and not self._close_deadline_set:
            # We sent Connection.Close: amqpConnectionCloseTimeout bounds the wait for Close-Ok.
            self._close_deadline_set = True
            deadline = trio.current_time() + self._settings.close_timeout
            self._reader_scope.deadline = min(self._reader_scope.deadline, deadline)
        # Cancelled here, before the core's bytes are taken, or not at all: a consumer task
        # flushing while its connection closes may be carrying the Close-Ok, and bytes taken
        # and then dropped by a cancellation never reach the client (py-amqp then saw the
        # socket close without Close-Ok, ~2% of closes with consumers running).
        await trio.lowlevel.checkpoint_if_cancelled()
        left = self._write_or_queue()
        if left is None:
            return
        if left:
            try:
                # The writer is behind (the client reads slowly): wait for room, shielded;
                # if the writer ends instead, it closes the outbox and this wait ends too.
                with trio.CancelScope(shield=True):
                    await self._outbox.send(left)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._record_reason("client stopped reading (socket broken)")
                return
        await trio.lowlevel.cancel_shielded_checkpoint()  # the schedule point send() had

    def flush_now(self) -> bool:
        """``flush`` for code that cannot wait (a publisher confirm sent from a Pulsar send's
        done-callback, server/confirms.py): the core's bytes are written, or queued for the
        writer, at once. False, with nothing taken, when that could mean waiting for room in
        the writer's queue, or while we close the connection (``flush`` sets its deadline):
        the caller must ``await flush()``."""
        if self.protocol.state is ConnectionState.CLOSING:
            return False
        if self._unwritten >= self._settings.write_queue_depth:
            return False  # the outbox may be full; with fewer chunks out, it has room
        self._write_or_queue()
        return True

    def _write_or_queue(self) -> bytes | None:
        """Take the core's bytes (None: there were none) and write them at once if nothing
        is queued ahead of them; what the socket does not take goes to the writer's queue.
        Returns what did not fit there (b"" when all did), for the caller to queue waiting."""
        data = self.protocol.data_to_send()
        if not data:
            return None
        if not self._unwritten:
            sent = write_now(self._stream, data)
            if sent:
                COUNTERS.outgoing_bytes += sent
                if sent == len(data):
                    return b""
                data = data[sent:]
        self._unwritten += 1
        try:
            self._outbox.send_nowait(data)
        except trio.WouldBlock:
            return data
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._record_reason("client stopped reading (socket broken)")
        return b""

    # ----------------------------------------------------------------------------- events

    async def _handle_events(self, events: list[ev.Event]) -> None:
        while events:
            for event in events:
                try:
                    session = self._session
                    # The per-message events first, straight to the session as plain calls:
                    # a read's publishes and acks are one pass, with no coroutine or
                    # checkpoint per message, unless a publish has to wait (then it is
                    # awaited at once, so the events keep their order). ``type() is``
                    # narrows the type for mypy without typing.cast, a call per message.
                    if type(event) is ev.PublishReceived and session is not None:
                        rest = session.publish_now(event)
                        if rest is not None:
                            await rest
                    elif type(event) is ev.AckReceived and session is not None:
                        session.ack_now(event)
                    else:
                        await self._handle_event(event)
                except AMQPError as error:
                    self._close_for(getattr(event, "channel", 0), error, _cause(event))
            # Answers such as accept_login release frames the core was holding back.
            events = self.protocol.take_events()

    def _close_for(self, channel: int, error: AMQPError, cause: ev.Cause | None = None) -> None:
        COUNTERS.protocol_error(error.reply_code)
        if error.is_hard or channel == 0:
            self._record_reason(f"closed by server: {error.reply_code} {error.reply_text}")
        self.protocol.refuse(channel, error, cause)

    async def fail(self, channel: int, error: AMQPError) -> None:
        """A background task (a consumer, the confirms) hit an error on ``channel``."""
        self._close_for(channel, error)
        if not error.is_hard and self._session is not None:
            await self._session.channel_closed(channel)
        await self.flush()

    async def _handle_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.LoginRequested):
            await self._login(event)
        elif isinstance(event, ev.VhostRequested):
            await self._open_vhost(event.vhost)
        elif isinstance(event, ev.ConnectionOpened):
            self.opened = True
            self._reader_scope.deadline = math.inf
            log.info(
                "connection opened peer=%s vhost=%s user=%s",
                self.peer.address,
                self.vhost,
                self.user,
            )
        elif isinstance(event, ev.ConnectionClosed):
            origin = "client" if event.by_client else "server"
            self._record_reason(f"closed by {origin}: {event.reply_code} {event.reply_text}")
            # Close-Ok only now, not queued by the core on Close: a client that has Close-Ok
            # may at once expect its exclusive queues gone and its unacknowledged messages
            # back in their queues, and any task flushing during a slow requeue (a consumer,
            # the confirms) would have carried a queued Close-Ok out first.
            try:
                await self._close_session()
            finally:
                self.protocol.accept_connection_close()
        elif isinstance(event, ev.ConnectionErrored):
            COUNTERS.protocol_error(event.error.reply_code)
            self._record_reason(
                f"closed by server: {event.error.reply_code} {event.error.reply_text}"
            )
        elif isinstance(event, ev.ConnectionTerminated):
            self._record_reason(event.reason)
        elif isinstance(event, ev.HeartbeatTimedOut):
            self._record_reason("missed heartbeats from client")
        elif isinstance(event, ev.UpdateSecretRequested):
            # Credentials are checked once, at login; a refreshed secret changes nothing yet.
            self.protocol.accept_update_secret()
        elif self._session is not None:
            await self._session.handle(event)

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            with trio.CancelScope(shield=True):
                await session.close()

    async def _open_vhost(self, vhost: str) -> None:
        self.vhost = vhost
        try:
            handle = await self._backend.open_vhost(vhost, self.user or "")
        except AMQPError as error:
            self._record_reason(f"vhost refused: {error.reply_code} {error.reply_text}")
            self.protocol.refuse_vhost(error.reply_code, error.reply_text)
            return
        self._counts = COUNTERS.vhost(vhost)
        self._counts.connection_opened()
        self._session = AMQPSession(handle, self, self._counts)
        self.protocol.accept_vhost()

    async def _login(self, event: ev.LoginRequested) -> None:
        COUNTERS.auth_attempts += 1
        self.mechanism = event.mechanism
        try:
            self.user = await self._authenticator.authenticate(
                event.mechanism, event.response, self.peer
            )
        except AuthenticationFailed as failure:
            COUNTERS.auth_failed(event.mechanism)
            self._record_reason(f"authentication failed: {failure}")
            await self._failure_delay()
            self.protocol.refuse_login(str(failure))
        else:
            self.owner = Owner(self.id, self.user)
            self.protocol.accept_login(self.user)

    async def _failure_delay(self) -> None:
        """Hold back the refusal of a repeated failure from the same address.

        Only this connection's task waits, so other clients are never slowed. The wait stays
        well inside the handshake deadline, so that the client still gets its 403.
        """
        if self._throttle is None:
            return
        now = trio.current_time()
        delay = self._throttle.failed(_host_of(self.peer.address), now)
        remaining = self._reader_scope.deadline - now
        delay = min(delay, remaining / 2)
        if delay > 0:
            await trio.sleep(delay)

    # ----------------------------------------------------------------------------- logging

    def _record_reason(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason

    def _log_closed(self) -> None:
        # A proxy's health check (PROXY LOCAL, then nothing) is not a client: keep it quiet.
        quiet = self._proxy_local and self.user is None
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "connection closed peer=%s vhost=%s user=%s reason=%s",
            self.peer.address,
            self.vhost,
            self.user,
            self.close_reason or "unknown",
        )


def _local_address(stream: trio.abc.Stream) -> tuple[str, int] | None:
    """(host, port) of our end of the socket under ``stream`` (TLS or not); None for a Unix
    socket or a stream without one (tests' memory streams)."""
    inner = getattr(stream, "transport_stream", stream)
    sock = getattr(inner, "socket", None)
    try:
        name = sock.getsockname() if sock is not None else None
    except OSError:
        return None
    if isinstance(name, tuple) and len(name) >= 2:
        return str(name[0]), int(name[1])
    return None


def _host_of(address: str) -> str:
    """``host`` of ``host:port`` (IPv6 too): failures are counted per host, not per port."""
    host, colon, _ = address.rpartition(":")
    return host if colon else address


def _cause(event: ev.Event) -> ev.Cause | None:
    """What a refusal of ``event`` names in its Close (a settlement names nothing)."""
    if isinstance(event, ev.CommandReceived):
        return event.command
    return event if isinstance(event, ev.PublishReceived) else None


def _tls_failure(error: BaseException) -> str:
    """The OpenSSL reason behind a failed handshake, in words, on one line."""
    cause = error.__cause__ or error.__context__
    if isinstance(cause, (ssl.SSLEOFError, EOFError)) or cause is None:
        return "client closed the connection during the handshake"
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"client certificate not trusted ({cause.verify_message})"
    if isinstance(cause, ssl.SSLError) and cause.reason:
        reason = cause.reason
        if reason in ("WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNKNOWN_PROTOCOL"):
            return f"not a TLS client hello ({reason.lower()}: plaintext on a TLS port?)"
        return reason.lower().replace("_", " ")
    text = str(cause) or type(cause).__name__
    return " ".join(text.split())
