"""The hints' settings: queue names as Azure takes them, and no key in a repr."""

from __future__ import annotations

import pytest

from processor.connection import azurite_connection_string
from processor.hints.settings import QUEUE_NAME, HintQueue


@pytest.mark.parametrize("name", ["abc", "blob-events", "a1-b2-c3", "q" * 63])
def test_queue_names_azure_takes(name: str) -> None:
    assert QUEUE_NAME.match(name)


@pytest.mark.parametrize("name", ["ab", "Blob", "a--b", "-ab", "ab-", "q" * 64, "a_b"])
def test_names_azure_refuses(name: str) -> None:
    assert not QUEUE_NAME.match(name)


def test_the_repr_never_shows_the_connection_string() -> None:
    conn = azurite_connection_string()
    assert "AccountKey" not in repr(HintQueue("hints", conn))
