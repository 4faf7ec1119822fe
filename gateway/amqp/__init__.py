"""Sans-IO AMQP 0-9-1 protocol core: framing, codec, connection and channel state machines."""
