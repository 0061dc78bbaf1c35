"""SDK failures as the lease store's errors: what each message names."""

from __future__ import annotations

from collections import Counter

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

from leases.errors import LeaseStoreMisconfigured, LeaseStoreUnavailable
from leases.table_calls import _translate
from leases.table_lease_rows import lease_partition, partition_keys
from leases.table_settings import check_names


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
