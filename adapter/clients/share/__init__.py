"""The SimpleConsumer's share-group backend (Kafka share groups, KIP-932)."""
