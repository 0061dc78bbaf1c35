"""`--spark-remote` with several servers: parsed with errors that name the bad entry, and spread
over a fleet by host name, each host moving to the next server when its own is lost."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observers.builtin.spark.session.remotes import after_loss, host_order, parse_remotes
from observers.errors import PluginLoadError

servers = st.lists(
    st.integers(1, 65535).map(lambda port: f"sc://10.0.0.1:{port}"), min_size=1, max_size=6
).map(lambda xs: tuple(dict.fromkeys(xs)))
names = st.text(min_size=1, max_size=30)


def test_a_list_is_parsed_in_its_order_with_parameters_kept() -> None:
    spec = " sc://a:15002, sc://b:15003/;use_ssl=false ,sc://c:1"
    assert parse_remotes(spec) == ("sc://a:15002", "sc://b:15003/;use_ssl=false", "sc://c:1")
    assert parse_remotes(None) == () and parse_remotes("  ") == ()


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("sc://a:15002,http://b:15002", "'http://b:15002' is not a Spark Connect URL"),
        ("sc://a:15002,", "'' is not a Spark Connect URL"),
        ("sc://a:port", "'sc://a:port'"),
        ("sc://:15002", "names no host"),
        ("sc://a:15002,sc://a:15002", "a server is named twice"),
    ],
)
def test_a_bad_entry_is_named(spec: str, said: str) -> None:
    with pytest.raises(PluginLoadError, match="--spark-remote") as raised:
        parse_remotes(spec)
    assert said in str(raised.value)


@given(servers, names)
def test_a_host_tries_every_server_once_starting_where_its_name_says(
    remotes: tuple[str, ...], host: str
) -> None:
    order = host_order(remotes, host)
    assert sorted(order) == sorted(remotes)
    start = remotes.index(order[0])
    assert order == remotes[start:] + remotes[:start]  # a rotation: the list's own order kept
    assert host_order(remotes, host) == order  # the same in every run


def test_a_fleet_spreads_over_the_servers() -> None:
    remotes = ("sc://a:1", "sc://b:1", "sc://c:1")
    first = Counter(host_order(remotes, f"cfp-{n}")[0] for n in range(3000))
    assert set(first) == set(remotes)
    assert all(800 <= n <= 1200 for n in first.values()), first  # about a third each


@given(servers, st.data())
def test_after_a_loss_the_next_servers_come_first_and_the_lost_one_last(
    order: tuple[str, ...], data: st.DataObject
) -> None:
    lost = data.draw(st.sampled_from(order))
    then = after_loss(order, lost)
    assert sorted(then) == sorted(order)
    assert then[-1] == lost
    i = order.index(lost)
    assert then[: len(order) - 1] == order[i + 1 :] + order[:i]
    assert after_loss(order, None) == order
