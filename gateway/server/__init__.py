"""The trio shell: listeners, one nursery per connection, writer task, heartbeats, shutdown."""
