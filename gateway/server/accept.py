"""The accept loop of one listener, which rides out a full file-descriptor table.

``trio.serve_listeners`` does the same job but, when accept(2) fails with EMFILE/ENFILE/ENOMEM/
ENOBUFS, logs an ERROR with a traceback every 100 ms for as long as the process is at its limit:
thousands of identical tracebacks that bury the cause. Here the first failure of an episode logs
one line naming the limit and how many clients are connected, the retries are silent, and the
first accept that succeeds again says how long new connections were refused. Clients meanwhile
wait in the kernel's backlog (or are refused by it once it is full), as with RabbitMQ, whose
``file_descriptors`` limit also stops the acceptor rather than the node.

Clients are not given the last descriptors: the ZooKeeper client opens an epoll descriptor for
each of its waits and the Pulsar client a socket for each new broker, and either failing with
EMFILE costs every client of the replica (declares refused with 541 while ZooKeeper is out of
reach). Close to the limit the loop stops accepting as it does at EMFILE, keeping
``reserve_for`` descriptors free for them.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("gateway.server")

# accept(2)'s errors that mean "the system or the process is out of something", not "this
# listener is broken": wait and try again.
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
RETRY_DELAY = 0.1
# Once refused, accepting resumes only with this many descriptors free beyond the reserve: the
# ZooKeeper client's epoll descriptors come and go, and without it an episode would end and
# start again with each of them.
RESUME_MARGIN = 8
# Descriptors are counted (in /proc) only this close to the limit, judged from the number of
# clients: far from it, an accept costs nothing extra.
_COUNT_WITHIN = 4096
_FD_DIRECTORY = "/proc/self/fd"

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


async def _run(handler: Handler, stream: trio.abc.Stream) -> None:
    try:
        await handler(stream)
    finally:
        await trio.aclose_forcefully(stream)


def reserve_for(limit: int) -> int:
    """Descriptors kept from clients at an open-files limit of ``limit``."""
    return min(64, max(16, limit // 8))


def _open_files_limit() -> int | None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def near_the_limit(connected: int, margin: int = 0) -> tuple[int, int] | None:
    """(descriptors in use, limit) when accepting one more client would leave fewer than
    ``reserve_for(limit) + margin`` free; None otherwise (or when this system cannot tell)."""
    limit = _open_files_limit()
    if limit is None or limit - connected > _COUNT_WITHIN:
        return None
    try:
        in_use = len(os.listdir(_FD_DIRECTORY))
    except OSError:
        return None  # no /proc, or out of descriptors for the listing itself: accept decides
    return (in_use, limit) if in_use + reserve_for(limit) + margin >= limit else None


async def serve_listener(
    listener: trio.abc.Listener[trio.abc.Stream],
    handler: Handler,
    handler_nursery: trio.Nursery,
    connected: Callable[[], int],
) -> None:
    """Accept on ``listener`` until cancelled, each connection's ``handler`` a task of
    ``handler_nursery``; ``connected()`` counts the clients, for the log line."""
    refused_since: float | None = None
    async with listener:
        while True:
            near = near_the_limit(connected(), 0 if refused_since is None else RESUME_MARGIN)
            if near is not None:
                if refused_since is None:
                    refused_since = trio.current_time()
                    in_use, limit = near
                    log.error(
                        "cannot accept connections: %d of %d open files in use, the last %d "
                        "kept for ZooKeeper and Pulsar (%d clients connected); retrying every "
                        "%.1f s until descriptors are freed",
                        in_use,
                        limit,
                        reserve_for(limit),
                        connected(),
                        RETRY_DELAY,
                    )
                await trio.sleep(RETRY_DELAY)
                continue
            try:
                stream = await listener.accept()
            except OSError as error:
                if error.errno not in CAPACITY_ERRNOS:
                    raise
                if refused_since is None:
                    refused_since = trio.current_time()
                    log.error(
                        "cannot accept connections: %s (%s; open files limit %s, %d clients "
                        "connected); retrying every %.1f s until descriptors are freed",
                        os.strerror(error.errno),
                        errno.errorcode[error.errno],
                        resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                        connected(),
                        RETRY_DELAY,
                    )
                await trio.sleep(RETRY_DELAY)
                continue
            if refused_since is not None:
                log.warning(
                    "accepting connections again after %.1f s", trio.current_time() - refused_since
                )
                refused_since = None
            handler_nursery.start_soon(_run, handler, stream)
