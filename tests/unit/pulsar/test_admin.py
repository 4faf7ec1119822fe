"""PulsarAdmin's request logic against httpx.MockTransport: retries, timeouts, redirects, errors.

The virtual clock (autojump_clock) makes backoff and timeout paths instant and lets the tests
check how long a call took in the admin client's own terms.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest
import trio

from gateway.pulsar.admin import PulsarAdmin, web_service_urls
from gateway.pulsar.errors import AdminError, Conflict, NotFound, PreconditionFailed, Unavailable
from gateway.pulsar.ids import MessageId
from gateway.pulsar.retry import RetryPolicy

Handler = Callable[[httpx.Request], Coroutine[Any, Any, httpx.Response]]
TOPIC = "persistent://public/ns/a b+c"

POLICY = RetryPolicy(retries=3, timeout=1.0, base_delay=0.1, max_delay=0.4, jitter=0.0)


def make_admin(
    handler: Handler, policy: RetryPolicy = POLICY, token: str | None = None
) -> PulsarAdmin:
    return PulsarAdmin(
        "http://broker-a:8080",
        auth_token=token,
        policy=policy,
        transport=httpx.MockTransport(handler),
    )


class Script:
    """Answers requests from a list of responses (or exceptions), recording what was asked."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def reason(status: int, text: str) -> httpx.Response:
    return httpx.Response(status, json={"reason": text})


async def test_5xx_is_retried_then_succeeds(autojump_clock: trio.abc.Clock) -> None:
    script = Script(reason(503, "loading"), reason(500, "zk"), httpx.Response(204))
    async with make_admin(script) as admin:
        start = trio.current_time()
        assert await admin.create_topic(TOPIC) is True
        elapsed = trio.current_time() - start
    assert len(script.requests) == 3
    assert elapsed == pytest.approx(0.1 + 0.2)  # the two backoff waits, nothing else


async def test_4xx_is_not_retried() -> None:
    script = Script(reason(412, "Subscription has active connected consumers"))
    async with make_admin(script) as admin:
        with pytest.raises(PreconditionFailed) as info:
            await admin.delete_subscription(TOPIC, "q")
    assert len(script.requests) == 1
    err = info.value
    assert err.status == 412 and err.method == "DELETE"
    assert err.reason == "Subscription has active connected consumers"
    assert err.path == "/admin/v2/persistent/public/ns/a%20b%2Bc/subscription/q"


async def test_connection_errors_exhaust_into_unavailable(autojump_clock: trio.abc.Clock) -> None:
    script = Script(httpx.ConnectError("connection refused"))
    async with make_admin(script) as admin:
        start = trio.current_time()
        with pytest.raises(Unavailable) as info:
            await admin.topic_stats(TOPIC)
        elapsed = trio.current_time() - start
    assert len(script.requests) == POLICY.attempts == 4
    assert info.value.status is None
    assert "connection refused" in info.value.reason and "4 attempt" in info.value.reason
    assert elapsed == pytest.approx(0.1 + 0.2 + 0.4)
    assert elapsed <= POLICY.worst_case_seconds()


async def test_a_hanging_broker_is_bounded_by_timeout_times_attempts(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def hang(request: httpx.Request) -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with make_admin(hang) as admin:
        start = trio.current_time()
        with pytest.raises(Unavailable) as info:
            await admin.tenant_exists("public")
        elapsed = trio.current_time() - start
    assert "no answer within 1 s" in info.value.reason
    assert elapsed == pytest.approx(4 * 1.0 + 0.1 + 0.2 + 0.4)
    assert elapsed <= POLICY.worst_case_seconds()


async def test_non_idempotent_requests_are_not_retried() -> None:
    script = Script(reason(503, "busy"))
    async with make_admin(script) as admin:
        with pytest.raises(Unavailable):
            await admin.request("POST", "/admin/v2/x", idempotent=False)
    assert len(script.requests) == 1


async def test_409_and_404_become_booleans() -> None:
    async with make_admin(Script(reason(409, "Subscription already exists for topic"))) as admin:
        assert await admin.create_subscription(TOPIC, "q") is False
        assert await admin.create_namespace("public", "ns") is False
    async with make_admin(Script(reason(404, "Subscription q not found"))) as admin:
        assert await admin.delete_subscription(TOPIC, "q") is False
        assert await admin.delete_topic(TOPIC) is False
        assert await admin.topic_exists(TOPIC) is False
        assert await admin.tenant_exists("nope") is False
        with pytest.raises(NotFound):
            await admin.skip_all(TOPIC, "q")


async def test_create_subscription_bodies() -> None:
    script = Script(httpx.Response(204))
    async with make_admin(script) as admin:
        await admin.create_subscription(TOPIC, "s/1", "earliest")
        await admin.create_subscription(TOPIC, "s/1", "latest")
        await admin.create_subscription(TOPIC, "s/1", MessageId(5, 6))
        with pytest.raises(ValueError):
            await admin.create_subscription(TOPIC, "s/1", "middle")  # type: ignore[arg-type]
    bodies = [r.content for r in script.requests]
    assert b'"ledgerId":-1' in bodies[0].replace(b" ", b"")
    assert b'"ledgerId":9223372036854775807' in bodies[1].replace(b" ", b"")
    assert b'"entryId":6' in bodies[2].replace(b" ", b"")
    assert script.requests[0].method == "PUT"
    assert script.requests[0].url.raw_path == (
        b"/admin/v2/persistent/public/ns/a%20b%2Bc/subscription/s%2F1"
    )


async def test_redirect_to_another_broker_keeps_the_token() -> None:
    seen: list[httpx.Request] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "broker-a":
            return httpx.Response(
                307, headers={"Location": "http://broker-b:8080/admin/v2/x/stats?a=1"}
            )
        return httpx.Response(200, json={"msgInCounter": 3, "subscriptions": {}})

    async with make_admin(handler, token="secret") as admin:
        data = (await admin.request("GET", "/admin/v2/x/stats")).json()
    assert data["msgInCounter"] == 3
    assert [r.url.host for r in seen] == ["broker-a", "broker-b"]
    assert all(r.headers["Authorization"] == "Bearer secret" for r in seen)
    assert seen[1].url.query == b"a=1"


def several_brokers(handler: Handler) -> PulsarAdmin:
    """An admin client given two brokers, as ``brokerWebServiceURL`` may name them."""
    return PulsarAdmin(
        "http://broker-a:8080,broker-b:8080",
        policy=POLICY,
        transport=httpx.MockTransport(handler),
    )


def test_web_service_urls_name_each_broker() -> None:
    assert web_service_urls("http://b1:8080,b2:8081") == ["http://b1:8080", "http://b2:8081"]
    assert web_service_urls("https://b1, b2:8443/pulsar/") == [
        "https://b1/pulsar",
        "https://b2:8443/pulsar",
    ]
    assert web_service_urls("http://[::1]:8080,b2:8080") == ["http://[::1]:8080", "http://b2:8080"]
    assert web_service_urls("http://127.0.0.1:8080/") == ["http://127.0.0.1:8080"]


async def test_a_broker_refusing_connections_hands_the_request_to_the_next() -> None:
    # A killed broker of a multi-broker cluster: its port refuses connections. The gateway
    # named both brokers; it must go on with the other one (issue 32 item 5: before, the URL
    # was handed to httpx whole, which refused it as an invalid port, and the gateway could
    # not start at all).
    seen: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url.host))
        if request.url.host == "broker-a":
            raise httpx.ConnectError("connection refused")
        return httpx.Response(204)

    async with several_brokers(handler) as admin:
        # Not idempotent, yet safe to send elsewhere: nothing reached broker-a.
        await admin.request("POST", "/admin/v2/x", idempotent=False)
        assert seen == ["broker-a", "broker-b"]
        # Later requests go straight to the broker that answered.
        await admin.request("GET", "/admin/v2/clusters")
        assert admin.base_url == "http://broker-b:8080"
    assert seen == ["broker-a", "broker-b", "broker-b"]


async def test_a_hanging_broker_sends_the_retry_to_the_next(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A frozen broker (SIGSTOP, a partition) accepts connections and never answers: the
    # attempt times out and the retry goes to the other broker.
    seen: list[str] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url.host))
        if request.url.host == "broker-a":
            await trio.sleep_forever()
        return httpx.Response(200, json=["public/default"])

    async with several_brokers(handler) as admin:
        start = trio.current_time()
        assert await admin.list_namespaces("public") == ["public/default"]
        elapsed = trio.current_time() - start
    assert seen == ["broker-a", "broker-b"]
    assert elapsed == pytest.approx(1.0 + 0.1)  # one attempt's timeout, one backoff


async def test_every_broker_refusing_is_unavailable(autojump_clock: trio.abc.Clock) -> None:
    script = Script(httpx.ConnectError("connection refused"))
    async with several_brokers(script) as admin:
        with pytest.raises(Unavailable):
            await admin.tenant_exists("public")
    # Each attempt tried both brokers.
    assert len(script.requests) == 2 * POLICY.attempts


async def test_reason_falls_back_for_html_and_text() -> None:
    html = httpx.Response(400, text="<h1>Bad Message 400</h1>")
    async with make_admin(Script(html)) as admin:
        with pytest.raises(AdminError) as info:
            await admin.topic_stats(TOPIC)
    assert info.value.reason == "Bad Request"
    async with make_admin(Script(httpx.Response(409, text="plain words"))) as admin:
        with pytest.raises(Conflict) as conflict:
            await admin.request("PUT", "/x")
    assert conflict.value.reason == "plain words"


async def test_stats_and_backlog_parsing() -> None:
    stats = {
        "msgInCounter": 12,
        "bytesInCounter": 120,
        "storageSize": 300,
        "publishers": [{}],
        "subscriptions": {
            "q": {
                "msgBacklog": 7,
                "unackedMessages": 2,
                "type": "Shared",
                "consumers": [{"consumerName": "c1", "unackedMessages": 2, "availablePermits": 8}],
                "msgOutCounter": 5,
                "isDurable": True,
            }
        },
    }
    async with make_admin(Script(httpx.Response(200, json=stats))) as admin:
        result = await admin.topic_stats(TOPIC)
        assert await admin.subscription_backlog(TOPIC, "q") == 7
        with pytest.raises(NotFound):
            await admin.subscription_backlog(TOPIC, "missing")
    assert result.msg_in_counter == 12 and result.publisher_count == 1
    sub = result.subscriptions["q"]
    assert (sub.msg_backlog, sub.unacked_messages, sub.type, sub.consumer_count) == (
        7,
        2,
        "Shared",
        1,
    )
    assert sub.consumers[0].name == "c1" and sub.consumers[0].available_permits == 8
    analysis = {"entries": 4, "messages": 103, "aborted": False}
    async with make_admin(Script(httpx.Response(200, json=analysis))) as admin:
        assert await admin.subscription_backlog(TOPIC, "q", precise=True) == 103


async def test_last_message_id_and_topic_lists() -> None:
    async with make_admin(
        Script(httpx.Response(200, json={"ledgerId": 9, "entryId": 4, "batchIndex": 2}))
    ) as admin:
        assert await admin.last_message_id(TOPIC) == MessageId(9, 4, 2, -1)
    listing = [
        "persistent://public/ns/a",
        "persistent://public/ns/p-partition-0",
        "persistent://public/ns/p-partition-1",
        "persistent://public/ns/x-partition-1a",
    ]
    async with make_admin(Script(httpx.Response(200, json=listing))) as admin:
        assert await admin.list_topics("public", "ns") == [
            "persistent://public/ns/a",
            "persistent://public/ns/x-partition-1a",
        ]
        assert len(await admin.list_topics("public", "ns", include_partitions=True)) == 4
