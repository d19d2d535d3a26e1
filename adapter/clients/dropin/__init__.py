"""The pieces of the ``adapter.kafka`` drop-in: its options and its records
(``adapter.kafka`` stays the public face)."""
