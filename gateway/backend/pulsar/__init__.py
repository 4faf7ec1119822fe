"""The real backend: AMQP entities in the metadata store, messages in Pulsar topics."""
