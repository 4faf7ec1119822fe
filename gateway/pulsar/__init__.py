"""The layer between trio and Apache Pulsar.

Producers, consumers, the admin REST client, and the bridge from pulsar-client's C++ callback
threads into trio. See docs/pulsar-layer.md.
"""
