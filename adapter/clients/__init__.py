"""Thin I/O around the pure core: Kafka clients, created lazily.

One package per client, over what every group member shares:

* :mod:`.member` -- what every group member does (the poll loop, starts, lag, resets, ...);
* :mod:`.push` -- the push consumer and its runners;
* :mod:`.simple` -- the SimpleConsumer; :mod:`.share` -- its share-group backend;
* :mod:`.dropin` -- the pieces of the ``adapter.kafka`` drop-in;
* :mod:`.producer` -- the producer.
"""
