"""A small async client for Pulsar's admin REST API (``/admin/v2``), on httpx under trio.

pulsar-client has no admin API, so the gateway talks to the web service directly. httpx runs
under trio through anyio/httpcore (the integration tests exercise it under pytest-trio).

Every call is bounded: each attempt by ``timeout`` (httpx's own timeouts plus a trio cancel scope,
because httpx's read timeout is per read, not per request), the whole call by
``RetryPolicy.worst_case_seconds()``. Idempotent requests are retried on connection errors,
timeouts and 5xx; a 4xx is an answer and becomes an :class:`~gateway.pulsar.errors.AdminError`.

Redirects (307 from a broker that does not own the topic's bundle) are followed by hand: httpx
drops the ``Authorization`` header when a redirect changes host, and Pulsar redirects to
another broker's address.

Several brokers. A web service URL may name several hosts, ``http://b1:8080,b2:8080`` (Pulsar's
own admin clients take that form, and so does ``brokerWebServiceURL``). Requests go to one of
them until it fails: a connection refused (nothing was sent) moves the same attempt on to the
next broker at once, whatever the method; a timeout or a connection lost moves the next
attempt (a retry, for idempotent requests) there. Any broker answers for any topic: one that
does not own the topic redirects to the one that does.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import httpx
import trio

from gateway.pulsar.admin_stats import BacklogAnalysis, CursorState, TopicStats
from gateway.pulsar.closing import AsyncClosing
from gateway.pulsar.errors import Conflict, NotFound, Unavailable, admin_error_for
from gateway.pulsar.ids import EARLIEST, LATEST, MessageId
from gateway.pulsar.names import (
    namespace_rest_path,
    quote_segment,
    topic_rest_path,
    topics_list_rest_path,
)
from gateway.pulsar.retry import RetryPolicy

Position = Literal["latest", "earliest"] | MessageId
TLSOption = ssl.SSLContext | str | bool | None

_REDIRECT_STATUSES = frozenset({307, 308})
_MAX_REDIRECTS = 5
# Pulsar lists the partitions of partitioned topics among the namespace's topics; a
# non-partitioned topic can never end like this (the broker refuses such names with 412).
_PARTITION_SUFFIX = re.compile(r"-partition-\d+$")


def web_service_urls(web_url: str) -> list[str]:
    """Each broker's base URL in a web service URL: ``http://b1:8080,b2:8080/prefix`` gives
    ``http://b1:8080/prefix`` and ``http://b2:8080/prefix``; a single host gives itself."""
    scheme, separator, rest = web_url.partition("://")
    hosts, slash, path = rest.partition("/")
    suffix = (slash + path).rstrip("/")
    found = [f"{scheme}://{host.strip()}{suffix}" for host in hosts.split(",") if host.strip()]
    return found if separator and found else [web_url.rstrip("/")]


def _ssl_verify(tls: TLSOption) -> ssl.SSLContext | bool:
    if tls is None:
        return True
    if isinstance(tls, str):
        # A CA bundle path: httpx 0.28 deprecates verify=<path>, so build the context here.
        return ssl.create_default_context(cafile=tls)
    return tls


E = TypeVar("E", bound=BaseException)


def cause_of_kind(error: BaseException, kind: type[E]) -> E | None:
    """The first exception of ``kind`` in ``error``'s chain of causes (``error`` included)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def tls_verification_failure(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification error behind ``error`` (httpx wraps httpcore's error, which
    wraps the async backend's, which wraps the ``ssl`` one), if there is one."""
    return cause_of_kind(error, ssl.SSLCertVerificationError)


def _reason(response: httpx.Response) -> str:
    """Pulsar's ``{"reason": ...}``, or a short stand-in for Jetty's HTML error pages."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("reason"), str):
        return str(data["reason"])
    text = response.text.strip()
    if not text or text.startswith("<"):
        return response.reason_phrase or f"HTTP {response.status_code}"
    return text[:300]


def _position_body(position: Position) -> dict[str, int]:
    if position == "latest":
        return LATEST.to_rest()
    if position == "earliest":
        return EARLIEST.to_rest()
    if isinstance(position, MessageId):
        return position.to_rest()
    raise ValueError(f"position must be 'latest', 'earliest' or a MessageId: {position!r}")


class PulsarAdmin(AsyncClosing):
    """Async admin client. Use as ``async with PulsarAdmin(url) as admin:`` or call aclose().

    Topic arguments are full names (``persistent://tenant/ns/local``); each part is
    percent-encoded into the REST path.
    """

    def __init__(
        self,
        web_url: str,
        *,
        auth_token: str | None = None,
        tls: TLSOption = None,
        timeout: float = 10.0,
        retries: int = 3,
        policy: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.policy = policy or RetryPolicy(retries=retries, timeout=timeout)
        headers = {"Accept": "application/json"}
        if auth_token:
            headers["Authorization"] = f"Bearer {auth_token}"
        # Requests go to base_urls[_current] until it fails (module docstring).
        self.base_urls = web_service_urls(web_url)
        self._current = 0
        self._http = httpx.AsyncClient(
            headers=headers,
            verify=_ssl_verify(tls),
            timeout=httpx.Timeout(self.policy.timeout),
            follow_redirects=False,
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    # -----------------------------------------------------------------------------------------
    # Transport: one request with retries, timeouts and redirects

    @property
    def base_url(self) -> str:
        """The broker requests go to now."""
        return self.base_urls[self._current]

    def _fail_over(self) -> None:
        """The next attempt goes to the next broker (after a timeout or a lost connection)."""
        self._current = (self._current + 1) % len(self.base_urls)

    async def _send_once(
        self, method: str, path: str, params: Mapping[str, str] | None, body: Any
    ) -> httpx.Response:
        """One attempt, on the current broker, or on the next ones while each refuses the
        connection: nothing was sent, so even a request that is not idempotent may go on."""
        count = len(self.base_urls)
        for offset in range(count):
            index = (self._current + offset) % count
            try:
                response = await self._send_to(self.base_urls[index] + path, method, params, body)
            except httpx.ConnectError:
                if offset == count - 1:
                    raise
                continue
            self._current = index
            return response
        raise AssertionError("unreachable")

    async def _send_to(
        self, url: str | httpx.URL, method: str, params: Mapping[str, str] | None, body: Any
    ) -> httpx.Response:
        """Send to ``url`` and follow redirects to the broker that owns the topic."""
        for _ in range(_MAX_REDIRECTS + 1):
            request = self._http.build_request(method, url, params=params, json=body)
            response = await self._http.send(request)
            location = response.headers.get("location")
            if response.status_code not in _REDIRECT_STATUSES or not location:
                return response
            await response.aclose()
            # The Location already carries the query string; keep method, body and headers.
            url = request.url.join(location)
            params = None
        return response

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        idempotent: bool = True,
    ) -> httpx.Response:
        """Send with retries; return the 2xx response or raise an AdminError subclass."""
        policy = self.policy
        attempt = 0
        while True:
            attempt += 1
            status: int | None = None
            failure: httpx.TransportError | None = None
            try:
                with trio.move_on_after(policy.timeout) as scope:
                    response = await self._send_once(method, path, params, body)
                if scope.cancelled_caught:
                    reason = f"no answer within {policy.timeout:g} s"
                    self._fail_over()
                elif response.status_code < 400:
                    return response
                else:
                    status = response.status_code
                    reason = _reason(response)
            except httpx.TransportError as exc:
                failure = exc
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                self._fail_over()
            # A certificate that failed verification fails the same way on every attempt.
            retry = failure is None or tls_verification_failure(failure) is None
            if retry and policy.should_retry(idempotent=idempotent, attempt=attempt, status=status):
                await trio.sleep(policy.delay(attempt))
                continue
            if status is None or policy.retryable_status(status):
                # Chained: callers (start-up checks) look for the ssl error underneath.
                raise Unavailable(
                    status, method, path, f"{reason} (after {attempt} attempt(s))"
                ) from failure
            raise admin_error_for(status, method, path, reason)

    async def _get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        return (await self.request("GET", path, params=params)).json()

    async def _exists(self, path: str) -> bool:
        try:
            await self.request("GET", path)
        except NotFound:
            return False
        return True

    async def _create(self, path: str, body: Any = None) -> bool:
        """PUT that creates; False if it already exists (409).

        After a retried attempt a 409 may mean that our own earlier attempt created it: the
        caller only learns "it exists now", which is what every caller needs.
        """
        try:
            await self.request("PUT", path, body=body)
        except Conflict:
            return False
        return True

    async def _delete(self, path: str, params: Mapping[str, str] | None = None) -> bool:
        """DELETE; False if it was not there (404)."""
        try:
            await self.request("DELETE", path, params=params)
        except NotFound:
            return False
        return True

    # -----------------------------------------------------------------------------------------
    # Brokers

    async def broker_configuration(self) -> dict[str, str]:
        """The broker's effective configuration (``/brokers/configuration/runtime``; needs a
        super-user role): every key, its value as a string."""
        found = await self._get_json("/admin/v2/brokers/configuration/runtime")
        return {str(key): str(value) for key, value in dict(found).items()}

    # -----------------------------------------------------------------------------------------
    # Tenants and namespaces

    async def tenant_exists(self, tenant: str) -> bool:
        return await self._exists(f"/admin/v2/tenants/{quote_segment(tenant)}")

    async def list_namespaces(self, tenant: str) -> list[str]:
        """``tenant/ns`` names."""
        return list(await self._get_json(f"/admin/v2/namespaces/{quote_segment(tenant)}"))

    async def namespace_exists(self, tenant: str, namespace: str) -> bool:
        return await self._exists(namespace_rest_path(tenant, namespace))

    async def create_namespace(self, tenant: str, namespace: str) -> bool:
        """True if created, False if it already existed. The tenant must exist (else 404)."""
        return await self._create(namespace_rest_path(tenant, namespace))

    async def delete_namespace(self, tenant: str, namespace: str, *, force: bool = False) -> bool:
        """Delete an empty namespace; False if there was none.

        ``force=True`` first deletes every topic in it (with force), because brokers refuse
        forced namespace deletion unless ``forceDeleteNamespaceAllowed=true``. Producers or
        consumers that are still connected get disconnected by the forced topic deletions.
        """
        path = namespace_rest_path(tenant, namespace)
        if not force:
            return await self._delete(path)
        # A topic can reappear between the listing and the namespace deletion (a client that
        # reconnects auto-creates it), hence a few rounds.
        for _ in range(self.policy.attempts + 2):
            try:
                for topic in await self.list_partitioned_topics(tenant, namespace):
                    await self._delete(topic_rest_path(topic) + "/partitions", {"force": "true"})
                for topic in await self.list_topics(tenant, namespace, include_partitions=True):
                    await self.delete_topic(topic, force=True)
            except NotFound:
                return False
            try:
                return await self._delete(path)
            except Conflict:  # "Cannot delete non empty namespace"
                continue
        return await self._delete(path)

    # -----------------------------------------------------------------------------------------
    # Topics

    async def list_topics(
        self, tenant: str, namespace: str, *, include_partitions: bool = False
    ) -> list[str]:
        """Full names of the namespace's persistent topics (system topics excluded).

        Pulsar lists each partition of a partitioned topic (``…-partition-N``) here; they are
        left out unless ``include_partitions``. Partitioned topics themselves come from
        :meth:`list_partitioned_topics`. Topics whose local name contains ``/`` are missing
        from this list (Pulsar stores them one level deeper); the gateway's name encoding
        never produces ``/``.
        """
        names = [str(t) for t in await self._get_json(topics_list_rest_path(tenant, namespace))]
        if include_partitions:
            return names
        return [n for n in names if not _PARTITION_SUFFIX.search(n)]

    async def list_partitioned_topics(self, tenant: str, namespace: str) -> list[str]:
        path = topics_list_rest_path(tenant, namespace) + "/partitioned"
        return [str(t) for t in await self._get_json(path)]

    async def topic_exists(self, topic: str) -> bool:
        """Whether a non-partitioned topic exists (its stats are readable).

        Note the broker deletes topics without subscriptions after some inactivity
        (``brokerDeleteInactiveTopicsEnabled``, on by default): a topic's existence is not a
        durable record of anything.
        """
        return await self._exists(topic_rest_path(topic) + "/stats")

    async def create_topic(self, topic: str) -> bool:
        """Create a non-partitioned topic; False if it already existed."""
        return await self._create(topic_rest_path(topic))

    async def delete_topic(self, topic: str, *, force: bool = False) -> bool:
        """Delete a non-partitioned topic; False if there was none.

        Without ``force`` the broker refuses (412) while producers or consumers are connected.
        Its subscriptions go with it.
        """
        return await self._delete(topic_rest_path(topic), {"force": str(force).lower()})

    async def set_topic_policy(self, topic: str, policy: str, body: Any) -> None:
        """Set one of a topic's policies (``retention``, ``inactiveTopicPolicies``, …): needs
        ``topicLevelPoliciesEnabled`` (on by default since Pulsar 2.11); the broker applies it
        through its system topic, a moment after answering."""
        await self.request("POST", f"{topic_rest_path(topic)}/{policy}", body=body)

    async def topic_policy(self, topic: str, policy: str) -> Any:
        """A policy set on the topic itself (not the namespace's or broker's default)."""
        return await self._get_json(f"{topic_rest_path(topic)}/{policy}", {"applied": "false"})

    async def entries_in(self, topic: str) -> int:
        """How many entries the topic's ledgers hold now (retention applied): one per
        message unless producers batched."""
        stats = await self._get_json(topic_rest_path(topic) + "/internalStats")
        return int(stats.get("numberOfEntries") or 0)

    async def cursor_state(self, topic: str, subscription: str) -> CursorState | None:
        """What ``subscription``'s cursor on ``topic`` has acknowledged; None if the topic has
        no such subscription. NotFound if the topic does not exist."""
        stats = await self._get_json(topic_rest_path(topic) + "/internalStats")
        cursor = (stats.get("cursors") or {}).get(subscription)
        return None if cursor is None else CursorState.from_json(cursor)

    async def topic_stats(self, topic: str) -> TopicStats:
        return TopicStats.from_json(await self._get_json(topic_rest_path(topic) + "/stats"))

    async def last_message_id(self, topic: str) -> MessageId:
        """Id of the last message written; on an empty topic ``entry_id`` is -1."""
        data = await self._get_json(topic_rest_path(topic) + "/lastMessageId")
        return MessageId.from_rest(data)

    # -----------------------------------------------------------------------------------------
    # Subscriptions

    def _sub_path(self, topic: str, subscription: str) -> str:
        return f"{topic_rest_path(topic)}/subscription/{quote_segment(subscription)}"

    async def list_subscriptions(self, topic: str) -> list[str]:
        return [str(s) for s in await self._get_json(topic_rest_path(topic) + "/subscriptions")]

    async def create_subscription(
        self, topic: str, subscription: str, position: Position = "latest"
    ) -> bool:
        """Create a durable subscription; False if it already existed (409).

        With a :class:`MessageId` the subscription's first message is the one *at* that id
        (inclusive; measured on Pulsar 4.0.8). The topic is created if it does not exist and
        the broker allows auto topic creation.
        """
        return await self._create(self._sub_path(topic, subscription), _position_body(position))

    async def delete_subscription(
        self, topic: str, subscription: str, *, force: bool = False
    ) -> bool:
        """Delete a subscription; False if there was none.

        Without ``force`` the broker refuses (412, PreconditionFailed) while consumers are
        connected; with it they are disconnected.
        """
        path = self._sub_path(topic, subscription)
        return await self._delete(path, {"force": str(force).lower()})

    async def skip_all(self, topic: str, subscription: str) -> None:
        """Drop the subscription's whole backlog (AMQP queue.purge). NotFound if missing."""
        await self.request("POST", self._sub_path(topic, subscription) + "/skip_all")

    async def expire_messages(self, topic: str, subscription: str, seconds: int) -> None:
        """Acknowledge every message of the subscription published more than ``seconds``
        ago (Pulsar's per-subscription expiry; the leader's TTL sweep). NotFound if missing."""
        path = self._sub_path(topic, subscription) + f"/expireMessages/{int(seconds)}"
        await self.request("POST", path)

    async def subscription_properties(self, topic: str, subscription: str) -> dict[str, str]:
        """The subscription's properties (str -> str). NotFound if missing."""
        found = await self._get_json(self._sub_path(topic, subscription) + "/properties")
        return {str(k): str(v) for k, v in (found or {}).items()}

    async def update_subscription_properties(
        self, topic: str, subscription: str, properties: Mapping[str, str]
    ) -> None:
        """Replace the subscription's properties. NotFound if missing."""
        path = self._sub_path(topic, subscription) + "/properties"
        await self.request("PUT", path, body=dict(properties))

    async def reset_cursor(self, topic: str, subscription: str, position: Position) -> None:
        """Move the subscription to a position (inclusive, like create_subscription)."""
        path = self._sub_path(topic, subscription) + "/resetcursor"
        await self.request("POST", path, body=_position_body(position))

    async def subscription_backlog(
        self, topic: str, subscription: str, *, precise: bool = False
    ) -> int:
        """Messages not yet acknowledged on a subscription. NotFound if it does not exist.

        By default this is the broker's ``msgBacklog`` (cheap, but counts a batch of messages
        as one entry). ``precise=True`` asks the broker to scan the backlog
        (:meth:`analyze_backlog`), which counts messages inside batches.
        """
        if precise:
            return (await self.analyze_backlog(topic, subscription)).messages
        stats = await self.topic_stats(topic)
        sub = stats.subscriptions.get(subscription)
        if sub is None:
            raise NotFound(
                404,
                "GET",
                topic_rest_path(topic) + "/stats",
                f"Subscription {subscription} not found for topic {topic}",
            )
        return sub.msg_backlog

    async def analyze_backlog(self, topic: str, subscription: str) -> BacklogAnalysis:
        """The broker reads the backlog and counts entries and messages (POST, read-only)."""
        path = self._sub_path(topic, subscription) + "/analyzeBacklog"
        return BacklogAnalysis.from_json((await self.request("POST", path)).json())
