"""The push consumer (:mod:`.push_consumer`) and its runners: concurrent, orderly, async."""
