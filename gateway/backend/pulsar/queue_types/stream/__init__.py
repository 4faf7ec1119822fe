"""Stream queues: a stream is a log topic read by non-durable readers (queues.py)."""
