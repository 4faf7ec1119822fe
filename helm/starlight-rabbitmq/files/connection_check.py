"""`helm test`'s AMQP connection check, run by the gateway image's Python (pamqp comes with
the gateway): a whole AMQP 0-9-1 session through the Service, not just the port.

Connection.Start/Tune/Open with PLAIN, a channel in confirm mode, a server-named exclusive
queue, a confirmed publish to it through the default exchange, Basic.Get until the message is
back (a deadline, not a sleep: the gateway hands the message to Pulsar and reads it back), and
Connection.Close. Exits non-zero naming the step that failed. Settings come from the
environment (AMQP_HOST, AMQP_PORT, AMQP_VHOST, AMQP_USERNAME, AMQP_PASSWORD).
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
USERNAME = os.environ.get("AMQP_USERNAME", "guest")
PASSWORD = os.environ.get("AMQP_PASSWORD", "guest")
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


def main():
    with socket.create_connection((HOST, PORT), timeout=TIMEOUT) as sock:
        session = Session(sock)
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        start = session.expect(commands.Connection.Start, "connection.start")
        product = start.server_properties.get("product", "?")
        session.send(
            commands.Connection.StartOk(
                client_properties={"product": "helm test"},
                mechanism="PLAIN",
                response=f"\0{USERNAME}\0{PASSWORD}",
            )
        )
        tune = session.expect(commands.Connection.Tune, "login (connection.tune)")
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
