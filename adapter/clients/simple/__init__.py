"""The SimpleConsumer (:mod:`.simple_consumer`), its options and its message views."""
