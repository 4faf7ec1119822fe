#!/usr/bin/env python
"""The reference README's smoke test: declare a queue, publish to it, get the message back, delete.

Run it against a gateway started with `make run`:  .venv/bin/python scripts/smoke_pika.py
"""

import sys

import pika

port = int(sys.argv[1]) if len(sys.argv) > 1 else 5672
connection = pika.BlockingConnection(pika.ConnectionParameters(host="127.0.0.1", port=port))
channel = connection.channel()
try:
    channel.queue_declare("test-queue")
    print("created test-queue queue")
    channel.basic_publish(exchange="", routing_key="test-queue", body=b"test")
    print("published message test")
    _, _, res = channel.basic_get(queue="test-queue", auto_ack=True)
    assert res is not None, "should have received a message"
    print("received message: " + res.decode())
    channel.queue_delete("test-queue")
    print("deleted test-queue queue")
finally:
    connection.close()
