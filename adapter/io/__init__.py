"""The one thin Kafka layer every client shares: configs, error mapping, the poll loop,
record views, publishing, topic provisioning.  Everything that talks to librdkafka is here
or in the clients built on it; the rules it applies live in :mod:`adapter.core`."""
