"""RabbitMQ's management HTTP API (``rabbitmq_management``) on the gateway: docs/management.md."""
