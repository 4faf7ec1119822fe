"""The per-namespace duties of the fleet's leader (namespace_leader.py runs them): the reaper,
the subscription cleaner and reconciler, the key sweeper, the message TTL sweep, the drop-head
trim, unused-queue expiry (``x-expires``), the delivery record pruner and the queue statistics.
The stream feed the leader also runs belongs to its queue type (queue_types/stream/feed.py)."""
