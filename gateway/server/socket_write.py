"""Writing a connection's bytes at once, without a round through its writer task.

Bytes handed to the writer task (``ClientConnection._write_loop``) go out when trio next runs
that task: one more pass of trio's run loop than writing them where they were made. For a
client waiting on each reply (one confirmed publish at a time, Basic.Get polling) that pass was
~0.1 ms (medians of 9 interleaved pairs: 0.09 ms per confirm, 0.11 per Get; docs/benchmarks.md,
"Synchronous patterns"). So when nothing is queued for the writer, the connection writes here,
without blocking, and queues only what the socket did not take; the writer keeps the order of
everything queued after.
"""

from __future__ import annotations

import os

import trio


def write_now(stream: trio.abc.Stream, data: bytes) -> int:
    """Send ``data`` on ``stream``'s socket without blocking: the number of bytes sent.

    0 when the stream is not a plain socket (a TLS stream encrypts in ``trio.SSLStream``), the
    socket is closed, its send buffer is full, or the send failed: the caller queues the bytes
    for the writer task, which waits for room or meets the error itself.
    """
    if type(stream) is not trio.SocketStream:
        return 0
    fd = stream.socket.fileno()
    if fd < 0:
        return 0
    try:
        # trio's sockets are non-blocking. A socket the client closed raises EPIPE, not
        # SIGPIPE: Python ignores that signal.
        return os.write(fd, data)
    except OSError:
        return 0
