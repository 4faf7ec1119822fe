"""The seam between the channel logic and where messages and metadata live.

``interface`` says what the channel logic may ask for, in AMQP terms; ``memory`` answers it
in-process (for the unit tests of the layers above); the Pulsar + ZooKeeper implementation
answers it for real.
"""
