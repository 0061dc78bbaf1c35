"""Hints: Blob Storage events that an Event Grid subscription writes into a queue, handed to
observers within seconds, before the change feed confirms them minutes later.

A hint is untrusted and provisional: at least once, in no order, possibly never. The feed stays
the truth; hints only make data earlier. `messages` reads one queue message (pure),
`batches` makes hints into the `ArrowBatch`es observers take, `poison` the copy a bad
message leaves in `<queue>-poison`, and `queue_reader` is the I/O: the competing consumer of
the queue that deletes a message only once its hint is safe with the observer.
"""
