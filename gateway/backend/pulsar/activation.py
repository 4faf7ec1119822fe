"""Lazy subscriptions: which record says that a keyed topic has had a message.

A queue's Shared subscription on a topic is what keeps the messages written there for the
queue. Creating one costs Pulsar a topic (a managed ledger, a ledger, a cursor: ~50 ms of the
broker's CPU on the development machine) and is most of what a declare+bind cost. But a
subscription is only needed once a message is written to the topic, and most topics a queue
is bound to never get one (reply queues, per-consumer server-named queues, keys nobody
publishes to). So for the topics named by a routing key (the default exchange's
``amq.default__<queue>``, a direct exchange's and a topic exchange's ``<exchange>__<key>``) the
subscription is created only once the topic is *active*: its routing key is registered in
ZooKeeper (``register_topic_key``, the record topic exchanges already used), which a publisher
does before its first message to the topic. Fanout and headers exchanges have one topic per
exchange, subscribed at bind as before.

The handshake (docs/fleet.md, "Lazy subscriptions", has the argument):

* the binder (Queue.Declare for the default exchange, Queue.Bind otherwise) writes its queue or
  binding, then reads the key from ZooKeeper after a sync, and subscribes if it is there,
  before answering Declare-Ok / Bind-Ok (if the view already has the key, it subscribes first);
* a publisher registers the key, then reads from ZooKeeper after a sync what the key routes to
  (the queue, or the exchange's bindings), subscribes those, and only then writes.

Whichever of the two writes comes second in ZooKeeper's order sees the other's, so for every
binding answered Bind-Ok and every message written after it, the subscription exists first.
"""

from __future__ import annotations

from typing import NamedTuple

from gateway.model.entities import DEFAULT_EXCHANGE, Exchange, ExchangeType
from gateway.model.routing import compile_topic

__all__ = ["Activation", "activation_for", "default_activation", "lazy_exchange"]


class Activation(NamedTuple):
    """The topic-key record that, once in ZooKeeper, makes a topic's subscriptions needed."""

    exchange: str
    routing_key: str


def lazy_exchange(exchange: Exchange) -> bool:
    """Whether ``exchange``'s topics are subscribed lazily (one topic per routing key)."""
    return exchange.type is ExchangeType.DIRECT or exchange.type is ExchangeType.TOPIC


def activation_for(exchange: Exchange, binding_key: str) -> Activation | None:
    """The record behind the one topic a binding with ``binding_key`` names, when that topic
    is subscribed lazily: direct exchanges, and topic-exchange keys without wildcards. None
    for fanout and headers (subscribed at bind) and for topic patterns (which cover only
    keys already registered, so their topics are active by definition)."""
    if exchange.type is ExchangeType.DIRECT:
        return Activation(exchange.name, binding_key)
    if exchange.type is ExchangeType.TOPIC and compile_topic(binding_key).shape == "literal":
        return Activation(exchange.name, binding_key)
    return None


def default_activation(queue: str) -> Activation:
    """The record behind the queue's own topic on the default exchange."""
    return Activation(DEFAULT_EXCHANGE, queue)
