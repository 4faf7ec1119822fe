"""One client connection: a reader, a single writer and a heartbeat timer in one nursery.

The sans-IO ``ServerConnection`` decides what every byte means; this module only moves bytes
and time in and out of it. Back-pressure: the writer is fed through a bounded memory channel,
so when a client stops reading, ``_flush`` blocks and the reader stops reading too, instead of
buffering without bound.
"""

from __future__ import annotations

import logging
import math

import trio

from gateway.amqp import events as ev
from gateway.amqp.connection import ServerConnection
from gateway.amqp.errors import AMQPError, ChannelError
from gateway.auth.authenticator import AuthenticationFailed, Authenticator, PeerIdentity
from gateway.server.session import Session
from gateway.server.settings import ServerSettings

log = logging.getLogger("gateway.connection")

READ_SIZE = 65536


class ClientConnection:
    def __init__(
        self,
        stream: trio.abc.Stream,
        settings: ServerSettings,
        authenticator: Authenticator,
        session: Session,
        peer: PeerIdentity,
    ) -> None:
        self._stream = stream
        self._settings = settings
        self._authenticator = authenticator
        self._session = session
        self.peer = peer
        self.protocol = ServerConnection(settings.connection, trio.current_time())
        self.user: str | None = None
        self.vhost: str | None = None
        self.opened = False
        # Why the connection ended, for the close log line; the first reason recorded wins.
        self.close_reason: str | None = None
        self.finished = trio.Event()
        self._outbox, self._outbox_reader = trio.open_memory_channel[bytes](
            settings.write_queue_depth
        )
        self._handshake_scope = trio.CancelScope()
        self._timer_rearmed = trio.Event()
        self._timer_deadline: float | None = None

    # ----------------------------------------------------------------------------- lifecycle

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._write_loop, nursery.cancel_scope)
                nursery.start_soon(self._timer_loop)
                await self._read_loop()
                # Whatever the core queued last (Close-Ok, Close, our protocol header) must
                # reach the client before the socket closes; the writer then ends the nursery.
                await self._flush()
                await self._outbox.aclose()
                with trio.move_on_after(self._settings.close_timeout):
                    await trio.sleep_forever()
                nursery.cancel_scope.cancel()
        finally:
            await self._session.close()
            await trio.aclose_forcefully(self._stream)
            self._log_closed()
            self.finished.set()

    async def request_close(self, error: AMQPError) -> None:
        """Server-initiated Connection.Close (e.g. 320 on shutdown); Close-Ok ends the connection."""
        if self.protocol.is_closed:
            return
        self._record_reason(f"closed by server: {error.reply_code} {error.reply_text}")
        self.protocol.close_connection(error)
        await self._flush()

    # ----------------------------------------------------------------------------- tasks

    async def _read_loop(self) -> None:
        self._handshake_scope.deadline = trio.current_time() + self._settings.handshake_timeout
        with self._handshake_scope:
            while not self.protocol.is_closed:
                try:
                    data = await self._stream.receive_some(READ_SIZE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "recv %s %d bytes %r",
                        self.peer.address,
                        len(data),
                        data[: self._settings.debug_binary_length],
                    )
                events = self.protocol.receive_data(data, trio.current_time())
                await self._handle_events(events)
                await self._flush()
                self._rearm_timer()
                if not data:
                    self._record_reason("client closed the socket")
                    return
        if self._handshake_scope.cancelled_caught:
            self._record_reason("handshake not completed in time")

    async def _write_loop(self, scope: trio.CancelScope) -> None:
        try:
            async for chunk in self._outbox_reader:
                await self._stream.send_all(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._record_reason("client stopped reading (socket broken)")
        finally:
            # The writer ending means nothing more can reach the client: end the connection.
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
                await self._handle_events(self.protocol.handle_timer(trio.current_time()))
                await self._flush()

    def _rearm_timer(self) -> None:
        """Wake the timer only if it now has to fire earlier than it planned to."""
        deadline = self.protocol.next_deadline()
        if deadline is not None and (self._timer_deadline is None or deadline < self._timer_deadline):
            self._timer_rearmed.set()

    async def _flush(self) -> None:
        data = self.protocol.data_to_send()
        if data:
            try:
                await self._outbox.send(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._record_reason("client stopped reading (socket broken)")

    # ----------------------------------------------------------------------------- events

    async def _handle_events(self, events: list[ev.Event]) -> None:
        for event in events:
            try:
                await self._handle_event(event)
            except ChannelError as error:
                channel = getattr(event, "channel", 0)
                self.protocol.close_channel(channel, error)
                await self._session.channel_closed(channel)
            except AMQPError as error:
                self._record_reason(f"closed by server: {error.reply_code} {error.reply_text}")
                self.protocol.close_connection(error)

    async def _handle_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.LoginRequested):
            await self._login(event)
        elif isinstance(event, ev.VhostRequested):
            self.vhost = event.vhost
            self.protocol.accept_vhost()
        elif isinstance(event, ev.ConnectionOpened):
            self.opened = True
            self._handshake_scope.deadline = math.inf
            log.info(
                "connection opened peer=%s vhost=%s user=%s", self.peer.address, self.vhost, self.user
            )
        elif isinstance(event, ev.ConnectionClosed):
            origin = "client" if event.by_client else "server"
            self._record_reason(f"closed by {origin}: {event.reply_code} {event.reply_text}")
        elif isinstance(event, ev.ConnectionTerminated):
            self._record_reason(event.reason)
        elif isinstance(event, ev.HeartbeatTimedOut):
            self._record_reason("missed heartbeats from client")
        else:
            await self._session.handle(event)

    async def _login(self, event: ev.LoginRequested) -> None:
        try:
            self.user = await self._authenticator.authenticate(
                event.mechanism, event.response, self.peer
            )
        except AuthenticationFailed as failure:
            self._record_reason(f"authentication failed: {failure}")
            self.protocol.refuse_login(str(failure))
        else:
            self.protocol.accept_login(self.user)

    # ----------------------------------------------------------------------------- logging

    def _record_reason(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason

    def _log_closed(self) -> None:
        log.info(
            "connection closed peer=%s vhost=%s user=%s reason=%s",
            self.peer.address,
            self.vhost,
            self.user,
            self.close_reason or "unknown",
        )
