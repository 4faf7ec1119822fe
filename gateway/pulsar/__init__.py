"""Producers, consumers, the admin REST client, and the bridge from pulsar-client threads to trio."""
