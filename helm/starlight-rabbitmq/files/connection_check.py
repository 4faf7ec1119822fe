"""`helm test`'s AMQP connection check, run by the gateway image's Python (pamqp comes with
the gateway): a whole AMQP 0-9-1 session through the Service, not just the port.

AMQP_LOGIN=session (with a login): Connection.Start/Tune/Open with PLAIN, a channel in confirm
mode, a server-named exclusive queue, a confirmed publish to it through the default exchange,
Basic.Get until the message is back (a deadline, not a sleep: the gateway hands the message to
Pulsar and reads it back), and Connection.Close.
AMQP_LOGIN=handshake (an authenticated fleet and no login given): Connection.Start, then an
invalid login that the gateway must refuse with 403; passes, saying what was not tested and
which value gives the test a login. AMQP_LOGIN=fail: the same, then fails naming that value.
Exits non-zero naming the step that failed. Settings come from the environment (AMQP_HOST,
AMQP_PORT, AMQP_VHOST, AMQP_USERNAME, AMQP_PASSWORD, AMQP_LOGIN, AMQP_LOGIN_SOURCE: where the
login comes from, for the messages).
"""

import os
import socket
import struct
import sys
import time

from pamqp import body, commands, frame, header

HOST = os.environ.get("AMQP_HOST", "127.0.0.1")
PORT = int(os.environ.get("AMQP_PORT", "5672"))
VHOST = os.environ.get("AMQP_VHOST", "/")
# Empty or unset: a Secret without the optional user name key.
USERNAME = os.environ.get("AMQP_USERNAME") or "helm-test"
# Unset: the Secret has no such key (the chart marks the reference optional, so that the test
# fails here naming the value instead of the pod waiting in CreateContainerConfigError).
PASSWORD = os.environ.get("AMQP_PASSWORD")
LOGIN = os.environ.get("AMQP_LOGIN", "session")
SOURCE = os.environ.get("AMQP_LOGIN_SOURCE", "AMQP_USERNAME and AMQP_PASSWORD")
NO_LOGIN = (
    "the fleet authenticates AMQP clients (authenticationEnabled=true) and helmTest has no "
    "login: put a password (with the chart's JWT logins, a token) in a Secret and name it in "
    "helmTest.existingSecret (key helmTest.passwordKey), or set helmTest.password"
)
TIMEOUT = float(os.environ.get("AMQP_TIMEOUT", "30"))
PAYLOAD = b"helm test " + str(time.time()).encode()


class Session:
    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""

    def send(self, value, channel=0):
        self.sock.sendall(frame.marshal(value, channel))

    def receive(self):
        # pamqp decodes a frame but does not frame a stream: read the 7-byte header's size,
        # then the payload and the frame-end octet (AMQP 0-9-1, 4.2.3).
        while True:
            if len(self.buffer) >= 7:
                size = struct.unpack(">I", self.buffer[3:7])[0]
                if len(self.buffer) >= size + 8:
                    used, channel, value = frame.unmarshal(self.buffer[: size + 8])
                    self.buffer = self.buffer[used:]
                    return channel, value
            chunk = self.sock.recv(65536)
            if not chunk:
                raise SystemExit(f"FAIL: {HOST}:{PORT} closed the connection")
            self.buffer += chunk

    def expect(self, kind, step):
        _, value = self.receive()
        if isinstance(value, (commands.Connection.Close, commands.Channel.Close)):
            raise SystemExit(f"FAIL at {step}: {value.reply_code} {value.reply_text}")
        if not isinstance(value, kind):
            raise SystemExit(f"FAIL at {step}: expected {kind.name}, got {value.name}")
        return value


def start(sock):
    session = Session(sock)
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    started = session.expect(commands.Connection.Start, "connection.start")
    return session, started.server_properties.get("product", "?")


def log_in(session, username, password):
    session.send(
        commands.Connection.StartOk(
            # Asks for Connection.Close 403 on a refused login rather than a bare close, as
            # RabbitMQ does for clients with this capability.
            client_properties={
                "product": "helm test",
                "capabilities": {"authentication_failure_close": True},
            },
            mechanism="PLAIN",
            response=f"\0{username}\0{password}",
        )
    )
    return session.receive()[1]


def handshake():
    """No login to test with: what can be checked without one."""
    with socket.create_connection((HOST, PORT), timeout=TIMEOUT) as sock:
        session, product = start(sock)
        try:
            answer = log_in(session, "helm-test", "not-a-valid-token")
            if isinstance(answer, commands.Connection.Close):
                session.send(commands.Connection.CloseOk())
        except SystemExit:  # closed without a word: refused, though not as RabbitMQ does
            answer = None
    if isinstance(answer, commands.Connection.Tune):
        raise SystemExit(
            f"FAIL: {HOST}:{PORT} let an invalid login in: the gateways do not authenticate "
            "clients although the chart's configuration says they do"
        )
    if answer is not None and not (
        isinstance(answer, commands.Connection.Close) and answer.reply_code == 403
    ):
        raise SystemExit(f"FAIL at login: expected 403 for an invalid login, got {answer!r}")
    checked = (
        f"{product} at {HOST}:{PORT} speaks AMQP 0-9-1 and refused an invalid login"
        + (f" ({answer.reply_code} {answer.reply_text})" if answer is not None else "")
    )
    if LOGIN == "fail":
        raise SystemExit(f"FAIL: no login to test with ({checked}): {NO_LOGIN}")
    print(f"OK (handshake only): {checked}.")
    print(f"NOT TESTED: a login, a publish and a get through Pulsar: {NO_LOGIN}.")


def main():
    if LOGIN in ("handshake", "fail"):
        return handshake()
    if PASSWORD is None:
        raise SystemExit(f"FAIL: no password: {SOURCE} is missing")
    with socket.create_connection((HOST, PORT), timeout=TIMEOUT) as sock:
        session, product = start(sock)
        tune = log_in(session, USERNAME, PASSWORD)
        step = f"login as {USERNAME!r} with the password from {SOURCE}"
        if isinstance(tune, commands.Connection.Close):
            raise SystemExit(f"FAIL at {step}: {tune.reply_code} {tune.reply_text}")
        if not isinstance(tune, commands.Connection.Tune):
            raise SystemExit(f"FAIL at {step}: expected Connection.Tune, got {tune.name}")
        session.send(commands.Connection.TuneOk(tune.channel_max, tune.frame_max, 0))
        session.send(commands.Connection.Open(virtual_host=VHOST))
        session.expect(commands.Connection.OpenOk, f"connection.open of vhost {VHOST!r}")
        session.send(commands.Channel.Open(), 1)
        session.expect(commands.Channel.OpenOk, "channel.open")
        session.send(commands.Confirm.Select(), 1)
        session.expect(commands.Confirm.SelectOk, "confirm.select")
        session.send(commands.Queue.Declare(queue="", exclusive=True, auto_delete=True), 1)
        queue = session.expect(commands.Queue.DeclareOk, "queue.declare").queue
        session.send(commands.Basic.Publish(exchange="", routing_key=queue), 1)
        session.send(header.ContentHeader(0, len(PAYLOAD), commands.Basic.Properties()), 1)
        session.send(body.ContentBody(PAYLOAD), 1)
        session.expect(commands.Basic.Ack, "publish confirm")
        deadline = time.monotonic() + TIMEOUT
        while True:
            session.send(commands.Basic.Get(queue=queue, no_ack=True), 1)
            _, value = session.receive()
            if isinstance(value, commands.Basic.GetOk):
                session.expect(header.ContentHeader, "basic.get (content header)")
                got = session.expect(body.ContentBody, "basic.get (body)").value
                if got != PAYLOAD:
                    raise SystemExit(f"FAIL: got {got!r}, published {PAYLOAD!r}")
                break
            if not isinstance(value, commands.Basic.GetEmpty):
                raise SystemExit(f"FAIL at basic.get: {value.name} {vars(value)}")
            if time.monotonic() > deadline:
                raise SystemExit(f"FAIL: the confirmed message never reached {queue}")
            time.sleep(0.2)  # polling interval of Basic.Get, bounded by the deadline
        session.send(commands.Connection.Close(200, "helm test done", 0, 0))
        session.expect(commands.Connection.CloseOk, "connection.close")
    print(f"OK: {product} at {HOST}:{PORT} vhost {VHOST!r}: published and got a message back")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except OSError as error:  # refused, reset, timed out, unresolvable: one line, not a trace
        sys.exit(f"FAIL: {HOST}:{PORT}: {error}")
