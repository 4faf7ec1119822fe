"""Celery's Flower against the management API: its broker view (the "Broker" tab, and its
``/api/queues/length``) with Flower's own code from PyPI.

Flower's RabbitMQ broker class (``flower/utils/broker.py``) asks for
``urljoin(broker_api, 'queues/' + vhost)`` with HTTP basic credentials, a 1 s connect and a
2 s request timeout, keeps the queues whose ``name`` it is looking for, and shows their
``messages``, ``messages_unacknowledged``, ``messages_ready``, ``consumers`` and
``idle_since``. Anything but a 200 (or an answer later than 2 s) and the tab is empty. For
the default vhost the broker URL ends in ``//``, the vhost is ``/`` and ``urljoin`` makes
the path ``/api/queues/`` (every vhost's queues, filtered by name, as on RabbitMQ); another
vhost is asked for by its percent-encoded name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pika
import pytest
from flower.utils.broker import Broker

from tests.support.gateway_process import free_port
from tests.support.managed_fleet import Managed

pytestmark = pytest.mark.timeout(240)

#: The columns of Flower's broker tab (templates/broker.html), idle_since aside.
COLUMNS = ("messages", "messages_unacknowledged", "messages_ready", "consumers")
#: Pulsar's statistics follow a publish or an ack within a moment; the counts are polled.
COUNTED_WITHIN = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def flower_queues(broker_url: str, api_url: str, names: list[str]) -> list[dict[str, Any]]:
    """What Flower's broker tab shows: its own ``Broker(...).queues(names)``, as its view calls
    it (``views/broker.py``; the class is chosen by the broker URL's scheme)."""
    broker = Broker(broker_url, http_api=api_url, broker_options={}, broker_use_ssl=None)
    found: list[dict[str, Any]] = asyncio.run(broker.queues(names))
    return found


def shown(queues: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    return {queue["name"]: tuple(queue.get(column) for column in COLUMNS) for queue in queues}


def wait_until_shown(
    broker_url: str, api_url: str, wanted: dict[str, tuple[int, ...]]
) -> list[dict[str, Any]]:
    """Flower's rows once they are ``wanted`` (the counts come from Pulsar's statistics)."""
    deadline = time.monotonic() + COUNTED_WITHIN
    while True:
        queues = flower_queues(broker_url, api_url, [*sorted(wanted), "not-a-queue"])
        if shown(queues) == wanted:
            return queues
        assert time.monotonic() < deadline, f"Flower shows {shown(queues)}, wanted {wanted}"
        time.sleep(0.5)  # polling Pulsar's statistics, bounded by the deadline above


class Workload:
    """Queues of one vhost with messages and consumers, held open by a pika connection: a
    queue with 5 messages and a consumer (prefetch 2, not acknowledging), an idle queue with 3
    messages and none, an empty queue with an auto-ack consumer."""

    def __init__(self, gateway: Managed, vhost: str) -> None:
        self.busy, self.idle, self.empty = unique("busy"), unique("idle"), unique("empty")
        self.connection = pika.BlockingConnection(
            pika.ConnectionParameters("127.0.0.1", gateway.port, vhost, heartbeat=0)
        )
        channel = self.connection.channel()
        channel.confirm_delivery()
        for queue in (self.busy, self.idle, self.empty):
            channel.queue_declare(queue, durable=True)
        for index in range(5):
            channel.basic_publish("", self.busy, f"b{index}".encode())
        for index in range(3):
            channel.basic_publish("", self.idle, f"i{index}".encode())
        self.held: list[int] = []
        consuming = self.connection.channel()
        consuming.basic_qos(prefetch_count=2)
        consuming.basic_consume(
            self.busy, lambda _c, method, _p, _b: self.held.append(method.delivery_tag)
        )
        self.connection.channel().basic_consume(
            self.empty, lambda *_: None, auto_ack=True, consumer_tag=unique("ctag")
        )
        deadline = time.monotonic() + 15
        while len(self.held) < 2:
            assert time.monotonic() < deadline, "the consumer got no deliveries"
            self.connection.process_data_events(time_limit=0.1)

    def wanted(self) -> dict[str, tuple[int, ...]]:
        return {
            self.busy: (5, 2, 3, 1),
            self.idle: (3, 0, 3, 0),
            self.empty: (0, 0, 0, 1),
        }

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.connection.close()


@pytest.fixture
def vhost(gateway: Managed) -> Iterator[str]:
    name = unique("flower")
    with gateway.client() as api:
        assert api.put(f"/api/vhosts/{name}").status_code == 201
    yield name
    with gateway.client() as api:
        api.delete(f"/api/vhosts/{name}")


def test_flowers_broker_class_shows_the_counts_of_a_named_vhost(
    gateway: Managed, vhost: str
) -> None:
    work = Workload(gateway, vhost)
    try:
        api_url = f"http://guest:guest@127.0.0.1:{gateway.url.rsplit(':', 1)[1]}/api/"
        broker_url = f"amqp://guest:guest@127.0.0.1:{gateway.port}/{quote(vhost, '')}"
        queues = wait_until_shown(broker_url, api_url, work.wanted())
        assert all(queue["vhost"] == vhost for queue in queues)
        # Flower shows idle_since too: absent (None) or a time, never an error.
        assert all(isinstance(queue.get("idle_since"), str | None) for queue in queues)
    finally:
        work.close()


def test_flowers_broker_class_on_the_default_vhost(gateway: Managed) -> None:
    """A broker URL without a vhost (kombu writes it ``...:5672//``): Flower asks for
    ``/api/queues/``, every vhost's queues, and keeps those it names."""
    work = Workload(gateway, "/")
    try:
        api_url = f"http://guest:guest@127.0.0.1:{gateway.url.rsplit(':', 1)[1]}/api/"
        broker_url = f"amqp://guest:guest@127.0.0.1:{gateway.port}//"
        queues = wait_until_shown(broker_url, api_url, work.wanted())
        assert all(queue["vhost"] == "/" for queue in queues)
    finally:
        work.close()


@pytest.fixture
def flower_process(gateway: Managed, vhost: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``celery flower`` itself (Flower's command from PyPI), on the gateway: its broker is
    the vhost, its ``--broker_api`` the gateway's management API. Yields its URL."""
    port = free_port()
    management_port = gateway.url.rsplit(":", 1)[1]
    command = [
        sys.executable,
        "-m",
        "celery",
        f"--broker=amqp://guest:guest@127.0.0.1:{gateway.port}/{quote(vhost, '')}",
        "flower",
        "--address=127.0.0.1",
        f"--port={port}",
        f"--broker_api=http://guest:guest@127.0.0.1:{management_port}/api/",
    ]
    environment = {**os.environ, "FLOWER_UNAUTHENTICATED_API": "true"}
    process = subprocess.Popen(
        command,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        try:
            output, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            output, _ = process.communicate()
        print(output)  # shown when the test failed


def test_the_flower_command_shows_the_queues_on_its_broker_tab(
    gateway: Managed, vhost: str, flower_process: tuple[str, subprocess.Popen[str]]
) -> None:
    """Flower's own web app: with no worker online its broker tab shows Celery's default
    queue, ``celery``; here a worker's queue with 5 messages, 2 of them held by its one
    consumer. ``/api/queues/length`` is the same view as JSON; ``/broker`` the page."""
    url, process = flower_process
    connection = pika.BlockingConnection(
        pika.ConnectionParameters("127.0.0.1", gateway.port, vhost, heartbeat=0)
    )
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.queue_declare("celery", durable=True)
        for index in range(5):
            channel.basic_publish("", "celery", f"task-{index}".encode())
        held: list[int] = []
        channel.basic_qos(prefetch_count=2)
        channel.basic_consume("celery", lambda _c, m, _p, _b: held.append(m.delivery_tag))
        deadline = time.monotonic() + COUNTED_WITHIN
        with httpx.Client(base_url=url, timeout=10) as flower:
            while True:
                connection.process_data_events(time_limit=0.1)
                assert process.poll() is None, "flower exited"
                try:
                    answer = flower.get("/api/queues/length")
                except httpx.TransportError:
                    answer = None  # not listening yet
                if answer is not None and answer.status_code == 200:
                    rows = answer.json()["active_queues"]
                    if shown(rows) == {"celery": (5, 2, 3, 1)}:
                        break
                assert time.monotonic() < deadline, f"Flower answered {answer and answer.text}"
                time.sleep(0.5)  # polling Flower (and Pulsar's statistics), bounded above
            page = flower.get("/broker")
            assert page.status_code == 200
            assert '<tr id="celery">' in page.text
        assert len(held) == 2
    finally:
        connection.close()
