"""The metadata store: a MetadataStore protocol, its ZooKeeper and in-memory implementations."""
