"""The accept loop of one listener, which rides out a full file-descriptor table.

``trio.serve_listeners`` does the same job but, when accept(2) fails with EMFILE/ENFILE/ENOMEM/
ENOBUFS, logs an ERROR with a traceback every 100 ms for as long as the process is at its limit:
thousands of identical tracebacks that bury the cause. Here the first failure of an episode logs
one line naming the limit and how many clients are connected, the retries are silent, and the
first accept that succeeds again says how long new connections were refused. Clients meanwhile
wait in the kernel's backlog (or are refused by it once it is full), as with RabbitMQ, whose
``file_descriptors`` limit also stops the acceptor rather than the node.
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

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


async def _run(handler: Handler, stream: trio.abc.Stream) -> None:
    try:
        await handler(stream)
    finally:
        await trio.aclose_forcefully(stream)


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
