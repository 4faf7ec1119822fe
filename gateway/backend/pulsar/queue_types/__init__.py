"""Queue types on Pulsar, RabbitMQ's ``rabbit_queue_type`` seam: what differs between a classic
queue and a stream is a ``QueueType`` (interface.py), one folder per type, picked once from the
queue's arguments by ``type_of`` (dispatch.py). A new queue type is a new folder here and one
entry in dispatch.py; nothing else branches on the type."""
