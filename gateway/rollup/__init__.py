"""The Spark Structured Streaming job rolling up per-vhost throughput (extra: [rollup])."""
