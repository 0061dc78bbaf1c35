"""SDK failures as the lease store's errors: what each message names."""

from __future__ import annotations

from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

from leases.errors import LeaseStoreMisconfigured, LeaseStoreUnavailable
from leases.table_store import _translate


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
