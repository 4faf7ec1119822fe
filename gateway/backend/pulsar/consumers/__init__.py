"""Consumer strategies of queues read through subscriptions: how a consumer of a priority queue
orders what it reads ahead (priority_reads.py), and a single-active-consumer queue's line
(single_active.py). Competing consumers with ``x-priority`` need no module of their own: that
is Pulsar's consumer priority level (gateway/pulsar/priority_level.py)."""
