"""SDK failures as the lease store's errors: what each message names; a listing's queries."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

from leases.errors import LeaseStoreMisconfigured, LeaseStoreUnavailable
from leases.store.table_calls import SIDE_BY_SIDE, TableCalls, _translate
from leases.store.table_lease_rows import lease_partition, partition_keys
from leases.store.table_settings import check_names
from tests import patience


def test_the_lease_store_names_its_endpoint_too() -> None:
    e = ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")
    out = _translate(e, "listing leases of p", "https://acct.table.core.windows.net")
    assert isinstance(out, LeaseStoreUnavailable)
    assert str(out) == (
        "listing leases of p: no Microsoft Entra ID token for "
        "https://acct.table.core.windows.net: DefaultAzureCredential failed to retrieve a token"
    )


def test_no_answer_at_all_is_unavailable_not_a_refusal() -> None:
    out = _translate(HttpResponseError("Connection reset"), "renewing 00", "https://acct")
    assert isinstance(out, LeaseStoreUnavailable)
    assert (
        str(out) == "renewing 00: no answer from https://acct: HttpResponseError: Connection reset"
    )
    assert not isinstance(out, LeaseStoreMisconfigured)


def test_a_processor_name_that_would_name_another_ones_lease_partition_is_refused() -> None:
    check_names("cfpleases", "orders~prod")  # a ~ alone is fine
    with pytest.raises(LeaseStoreMisconfigured, match="must not end in ~ and digits"):
        check_names("cfpleases", "orders~3")


def test_leases_spread_over_the_partitions_evenly_and_always_the_same_way() -> None:
    tokens = [f"{i:02d}" for i in range(100)] + [f"scan-{i:02d}" for i in range(8)]
    keys = Counter(lease_partition("p", t, 4) for t in tokens)
    assert set(keys) == set(partition_keys("p", 4))
    assert max(keys.values()) < 2 * len(tokens) / 4
    assert lease_partition("p", "07", 4) == lease_partition("p", "07", 4)


class _Client:
    url, table_name = "https://acct.table.core.windows.net/leases", "leases"


def _calls() -> TableCalls:
    return TableCalls(cast(Any, _Client()), timeout_s=30)  # fixed on purpose: never reached


def test_a_listing_queries_its_partitions_side_by_side_in_order() -> None:
    """Each partition's query waits until all four are in flight: one after another, the first
    would wait for ever (its deadline is far off; the barrier would fail the test first)."""
    calls = _calls()
    barrier = asyncio.Barrier(4)
    in_flight, most = 0, 0

    def query(pk: int) -> Callable[[], Awaitable[int]]:
        async def op() -> int:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            async with asyncio.timeout(patience.left_s()):
                await barrier.wait()
            in_flight -= 1
            return pk

        return op

    async def main() -> list[int]:
        return await calls.run_side_by_side("listing leases of p", [query(i) for i in range(4)])

    assert asyncio.run(main()) == [0, 1, 2, 3]
    assert most == 4


def test_a_listing_keeps_at_most_eight_queries_in_flight() -> None:
    calls = _calls()
    in_flight, most = 0, 0

    async def op() -> None:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0)
        in_flight -= 1

    asyncio.run(calls.run_side_by_side("listing leases of p", [op] * 64))
    assert most == SIDE_BY_SIDE == 8


def test_a_partition_that_fails_fails_the_listing_and_stops_the_others() -> None:
    calls = _calls()
    cancelled = []

    async def fails() -> None:
        raise TimeoutError  # what the transport raises for a request past its deadline

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(LeaseStoreUnavailable, match=r"^listing leases of p: TimeoutError") as e:
        asyncio.run(calls.run_side_by_side("listing leases of p", [waits, fails, waits]))
    assert cancelled == [True, True]
    assert isinstance(e.value.__cause__, TimeoutError)


def test_a_listing_cancelled_ends_cancelled_whatever_its_queries_raise_on_the_way_out() -> None:
    """A query cut short by its caller's cancellation may fail (a client closed meanwhile):
    the caller asked to stop, so it gets its CancelledError, not that failure."""
    calls = _calls()

    started: list[bool] = []
    both = asyncio.Event()  # both queries under way

    async def fails_when_cut_short() -> None:
        started.append(True)
        if len(started) == 2:
            both.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("Session is closed") from None

    async def main() -> None:
        task = asyncio.create_task(
            calls.run_side_by_side("listing leases of p", [fails_when_cut_short] * 2)
        )
        await both.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
