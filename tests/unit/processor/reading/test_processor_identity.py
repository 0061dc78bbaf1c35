"""A processor's identity: claimed once, refused when a host differs, recorded for processors
made before identities existed."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leases import LeaseToken, MemoryLeaseStore
from processor.changefeed.change_filter import ChangeFilter, FilterError
from processor.reading.processor_identity import IdentityMismatch, ProcessorIdentity, claim_identity

END = datetime(2026, 1, 2, tzinfo=UTC)
LOGS = ProcessorIdentity(ChangeFilter.of(containers=["logs-*"]), END)


async def test_the_first_host_records_its_identity_and_the_next_must_match() -> None:
    store = MemoryLeaseStore()
    assert await claim_identity(store, LOGS, processor="p", table="t") == LOGS
    same = ProcessorIdentity(ChangeFilter.of(containers=["logs-*"]), END)
    assert await claim_identity(store, same, processor="p", table="t") == LOGS
    other = ProcessorIdentity(ChangeFilter.of(containers=["raw"]), END)
    with pytest.raises(IdentityMismatch) as e:
        await claim_identity(store, other, processor="p", table="t")
    message = str(e.value)
    assert "processor 'p' (lease table 't') was created with filter: container logs-*" in message
    assert "this host has filter: container raw" in message and "--processor-name" in message
    with pytest.raises(IdentityMismatch, match="ends at"):
        await claim_identity(store, ProcessorIdentity(LOGS.change), processor="p", table="t")


async def test_a_processor_made_before_identities_delivered_everything() -> None:
    store = MemoryLeaseStore()
    await store.create_if_absent(LeaseToken("00"), None)
    with pytest.raises(IdentityMismatch, match="created with filter: everything"):
        await claim_identity(store, LOGS, processor="p", table="t")
    assert await claim_identity(store, ProcessorIdentity(), processor="p", table="t") == (
        ProcessorIdentity()
    )


@pytest.mark.parametrize("text", ["{", "[]", '{"endTime": "soon"}', '{"filter": []}'])
def test_an_unreadable_stored_identity_is_named(text: str) -> None:
    with pytest.raises(FilterError, match="the row"):
        ProcessorIdentity.from_text(text, where="the row")


def test_an_identity_reads_back_equal() -> None:
    assert ProcessorIdentity.from_text(LOGS.text(), where="x") == LOGS
    assert ProcessorIdentity.from_text("", where="x") == ProcessorIdentity()
