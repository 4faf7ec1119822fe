"""Classic queues: a queue is its Shared subscriptions on the topics its bindings cover."""
