"""Consumer strategies of queues read through subscriptions, picked once from the queue's
arguments (strategy.py): competing consumers, or a single-active-consumer queue's line
(single_active.py). How a consumer of a priority queue orders what it reads ahead is
priority_reads.py; ``x-priority`` among competing consumers needs no module of its own: that is
Pulsar's consumer priority level (gateway/pulsar/priority_level.py)."""
