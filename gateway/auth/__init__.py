"""Authentication (SASL PLAIN/AMQPLAIN/EXTERNAL, JWT, TLS identity) and vhost authorization."""
