"""What an observer may declare beyond the contract, and the defaults when it does not."""

from __future__ import annotations

import dataclasses

import observers
from observers import (
    Closes,
    EnteredOncePerHost,
    KeepsDeadLetters,
    Opens,
    TakesOptions,
    checkpoints_after_each_batch,
    dead_letter_dir,
    needs_segment_order,
    singleton_jobs,
    takes_arrow,
    takes_changes,
)
from observers import protocol as contract


def test_what_observers_declare_beyond_the_contract_and_the_defaults() -> None:
    class Plain:
        def process_changes(self, ctx: object, events: object) -> None: ...

    class Buffering(Plain):
        auto_checkpoint = False

    class OrderedFactory:
        needs_segment_order = False
        jobs = ("a job",)

    assert checkpoints_after_each_batch(Plain()) and not checkpoints_after_each_batch(Buffering())
    assert needs_segment_order(Plain) and not needs_segment_order(OrderedFactory())
    assert singleton_jobs(Plain) == () and singleton_jobs(OrderedFactory()) == ("a job",)


def test_every_capability_is_a_protocol_exported_where_plugins_import_from() -> None:
    """The host asks with `isinstance` against these; a plugin's type checker checks them."""
    capabilities = [
        name
        for name, value in vars(contract).items()
        if isinstance(value, type)
        and getattr(value, "_is_protocol", False)
        and value.__module__ == contract.__name__
    ]
    assert len(capabilities) >= 14, capabilities
    assert set(capabilities) <= set(observers.__all__)
    assert set(capabilities) <= set(contract.__all__)


def test_the_optional_methods_and_the_factory_capabilities_are_found_by_their_protocols() -> None:
    class Arrow:
        def process_arrow(self, ctx: object, batch: object) -> None: ...

        async def open(self, ctx: object) -> None: ...

    class Changes:
        def process_changes(self, ctx: object, events: object) -> None: ...

        def close(self, ctx: object, reason: object) -> None: ...

    class NotCallable:
        process_arrow = None

    class Factory:
        dead_letter_dir = "/dead"

        @dataclasses.dataclass
        class Options:
            size: int = 1

        async def __aenter__(self) -> Factory:
            return self

        async def __aexit__(self, *exc: object) -> None: ...

    assert isinstance(Arrow(), Opens) and not isinstance(Arrow(), Closes)
    assert isinstance(Changes(), Closes) and not isinstance(Changes(), Opens)
    assert takes_arrow(Arrow()) and not takes_changes(Arrow())
    assert takes_changes(Changes()) and not takes_arrow(Changes())
    assert not takes_arrow(NotCallable()) and not takes_changes(NotCallable())
    assert dead_letter_dir(Factory()) == "/dead" and dead_letter_dir(Arrow()) is None
    assert isinstance(Factory, TakesOptions) and not isinstance(Arrow, TakesOptions)
    assert isinstance(Factory(), EnteredOncePerHost) and not isinstance(Arrow(), EnteredOncePerHost)
    assert isinstance(Factory(), KeepsDeadLetters)
