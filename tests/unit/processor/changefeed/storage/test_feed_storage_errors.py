"""SDK failures as the feed's errors: what each message names."""

from __future__ import annotations

from typing import ClassVar

from azure.core.exceptions import ClientAuthenticationError, HttpResponseError

from processor.changefeed.errors import FeedError, FeedUnavailable
from processor.changefeed.storage.feed_storage import _translate


def test_no_token_names_the_endpoint_and_the_credential_failure_not_a_status() -> None:
    e = ClientAuthenticationError("DefaultAzureCredential failed to retrieve a token")
    out = _translate(e, "meta/segments.json", "acct.blob.core.windows.net")
    assert isinstance(out, FeedUnavailable)
    assert str(out) == (
        "meta/segments.json: no Microsoft Entra ID token for acct.blob.core.windows.net: "
        "DefaultAzureCredential failed to retrieve a token"
    )
    assert "answered 0" not in str(out) and "None" not in str(out)


def test_no_answer_at_all_names_the_endpoint_and_the_failure() -> None:
    e = HttpResponseError("Connection reset by peer")
    out = _translate(e, "meta/segments.json", "acct.blob.core.windows.net")
    assert isinstance(out, FeedUnavailable)
    assert str(out) == (
        "meta/segments.json: no answer from acct.blob.core.windows.net: "
        "HttpResponseError: Connection reset by peer"
    )


def test_an_answer_names_its_status() -> None:
    class Reply:
        status_code = 403
        reason = "Forbidden"
        headers: ClassVar[dict[str, str]] = {}

        def text(self) -> str:
            return ""

    out = _translate(HttpResponseError(response=Reply()), "log/00/x.avro", "acct")  # type: ignore[arg-type]
    assert isinstance(out, FeedError) and "storage answered 403 (Forbidden)" in str(out)
