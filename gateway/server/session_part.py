"""What the session's jobs share (publishing.py, consuming.py), and the base that keeps it."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.backend.interface import VirtualHost
from gateway.observability.counters import VhostCounters
from gateway.server.channel_state import SessionChannel, SessionLink
from gateway.server.direct_replies import DirectReplies


@dataclass(frozen=True, slots=True)
class SessionShared:
    """One connection's session as its jobs see it."""

    vhost: VirtualHost
    link: SessionLink
    counts: VhostCounters
    #: The session's open channels (the same dict, shared).
    channels: dict[int, SessionChannel]
    replies: DirectReplies


class SessionPart:
    """A job of one connection's session. It keeps what it shares as plain attributes: the
    per-message paths read each with one lookup."""

    def __init__(self, shared: SessionShared) -> None:
        self._vhost = shared.vhost
        self._link = shared.link
        self._counts = shared.counts
        self._channels = shared.channels
        self._replies = shared.replies
        self._protocol = shared.link.protocol
