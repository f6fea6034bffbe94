"""In-process stand-ins for a stage's Kafka clients, for the checkpoint and changelog tests
that drive ``Checkpointer`` without a broker: a producer whose sends are acknowledged at once
and kept in order (with the compacted view a compacting broker would keep), and a consumer
whose commits succeed."""

from __future__ import annotations


class Acked:
    """A send the broker acknowledged."""

    is_done = True
    exception = None

    def failed(self):
        return False

    def get(self, timeout=None):
        return None


class Log:
    """A producer whose sends are acknowledged at once, and the compacted changelog."""

    def __init__(self):
        self.messages: list[tuple[bytes, bytes | None]] = []

    def send(self, topic, key=None, value=None, partition=None):
        self.messages.append((key, value))
        return Acked()

    def flush(self, timeout=None):
        pass

    def compacted(self) -> dict[bytes, bytes]:
        latest: dict[bytes, bytes] = {}
        for k, v in self.messages:
            if v is None:
                latest.pop(k, None)
            else:
                latest[k] = v
        return latest


class Consumer:
    """A consumer whose offset commits succeed."""

    def commit(self, offsets):
        pass

    def commit_async(self, offsets, callback=None):
        pass
