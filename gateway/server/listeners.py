"""Listening sockets built by hand, so that several worker processes can share one port.

``trio.open_tcp_listeners`` binds and listens in one step and never sets ``SO_REUSEPORT``. The
gateway needs both things it cannot do:

- ``SO_REUSEPORT`` (Linux 3.9+, the BSDs): every worker of ``--workers N`` binds the same
  address, and the kernel spreads incoming connections over the listening sockets of the
  group by a hash of the connection's addresses. Each worker accepts on its own socket, so
  there is no thundering herd and no accept lock. Linux only groups sockets of the same user.
- Binding apart from listening: a gateway binds first (a taken port is reported at once, before
  the vhosts are loaded) and listens only when it is ready. Until then the kernel refuses
  connections to a lone replica, and leaves a worker that restarts out of the group, so no
  client waits in the backlog of a replica that is still loading.
"""

from __future__ import annotations

import errno
import os
import socket as stdlib_socket
import stat

import trio

# The kernel clamps it to net.core.somaxconn; asking for the most lets the administrator's
# setting decide (trio does the same).
BACKLOG = 0xFFFF


def reuse_port_supported() -> bool:
    return hasattr(stdlib_socket, "SO_REUSEPORT")


async def bind_tcp(host: str, port: int, *, reuse_port: bool) -> list[trio.socket.SocketType]:
    """Bound, not yet listening, TCP sockets for every address ``host`` resolves to.

    Like ``trio.open_tcp_listeners``: a name that resolves to IPv4 and IPv6 gets one socket per
    family, address families the machine lacks are skipped, and any bind error closes what was
    opened and is raised (``OSError``, ``errno.EADDRINUSE`` for a taken port).
    """
    if reuse_port and not reuse_port_supported():
        raise OSError(errno.ENOPROTOOPT, "SO_REUSEPORT is not available on this system")
    infos = await trio.socket.getaddrinfo(
        host, port, type=stdlib_socket.SOCK_STREAM, flags=stdlib_socket.AI_PASSIVE
    )
    sockets: list[trio.socket.SocketType] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, sockaddr in infos:
            if (family, sockaddr) in seen:
                continue
            seen.add((family, sockaddr))
            try:
                sock = trio.socket.socket(family, kind, proto)
            except OSError as error:
                if error.errno == errno.EAFNOSUPPORT:
                    continue  # e.g. "localhost" resolving to ::1 on a host without IPv6
                raise
            sockets.append(sock)
            # Restart without waiting for TIME_WAIT connections of the previous run to expire.
            sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEPORT, 1)
            if family == stdlib_socket.AF_INET6:
                # Otherwise "::" also takes the IPv4 port and the 0.0.0.0 socket fails to bind.
                sock.setsockopt(stdlib_socket.IPPROTO_IPV6, stdlib_socket.IPV6_V6ONLY, 1)
            await sock.bind(sockaddr)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    if not sockets:
        raise OSError(errno.EAFNOSUPPORT, f"no usable address family for {host!r}")
    return sockets


async def bind_unix(path: str) -> trio.socket.SocketType:
    """A bound, not yet listening, Unix domain socket at ``path``, readable and writable by
    this user only (mode 0600): whoever can connect may send PROXY headers when the listener
    is trusted for them.

    A socket file left behind by a previous run is replaced; any other file is not touched.
    """
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    sock = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
    try:
        # The socket file gets its mode from the umask at bind time: create it private.
        previous = os.umask(0o177)
        try:
            await sock.bind(path)
        finally:
            os.umask(previous)
    except BaseException:
        sock.close()
        raise
    return sock


def start_listening(sock: trio.socket.SocketType) -> trio.SocketListener:
    """Listen on a socket from ``bind_tcp``; from now on the kernel queues connections."""
    sock.listen(BACKLOG)
    return trio.SocketListener(sock)
