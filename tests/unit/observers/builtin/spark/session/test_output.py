"""`--output` parsing, and how its credentials become ABFS settings and delta-rs options."""

from __future__ import annotations

from pathlib import Path

import pytest

from observers import PluginLoadError
from observers.builtin.spark.session.container import blob_endpoint
from observers.builtin.spark.session.output import (
    SECRET_SETTINGS,
    delta_rs_options,
    excluded_container,
    hadoop_settings,
    parse_output,
)
from observers.builtin.spark.tables import check_layout
from observers.options import StorageAccess
from processor.connection import azurite_connection_string, storage_access

KEY = "a2V5LW9mLXRoZS1hY2NvdW50LW5vdC1hLXJlYWwtb25l"
HOST = "acct.dfs.core.windows.net"
REMOTE = f"abfss://tables@{HOST}/feed/x"


def test_local_folders_and_file_uris_are_local(tmp_path: Path) -> None:
    for text in (str(tmp_path / "t"), f"file://{tmp_path}/t"):
        out = parse_output(text)
        assert out.local == (tmp_path / "t").resolve() and not out.is_remote
        assert out.changes == f"{(tmp_path / 't').resolve().as_uri()}/changes"


def test_an_abfs_uri_names_container_account_and_folder() -> None:
    out = parse_output("abfss://Tables@ACCT.dfs.core.windows.net/feed/x/")
    assert (out.container, out.account, out.host, out.path) == ("Tables", "acct", HOST, "feed/x")
    assert out.state == f"abfss://Tables@{HOST}/feed/x/state" and out.is_remote
    root = parse_output(f"abfs://t@{HOST}")
    assert root.changes == f"abfs://t@{HOST}/changes" and root.path == ""


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "--output is required"),
        (f"wasbs://t@{HOST.replace('dfs', 'blob')}/x", "Hadoop 3.5 has no WASB driver"),
        ("s3a://bucket/x", "s3a:// is not supported"),
        ("abfss://acct.dfs.core.windows.net/x", "CONTAINER@ACCOUNT"),
        ("abfss://t@acct.blob.core.windows.net/x", "the account's dfs host"),
    ],
)
def test_what_cannot_hold_the_tables_is_refused_with_what_works(text: str, problem: str) -> None:
    with pytest.raises(PluginLoadError, match=problem):
        parse_output(text)


def test_a_key_or_a_sas_becomes_settings_of_that_account_only() -> None:
    out = parse_output(REMOTE)
    keyed = hadoop_settings(out, StorageAccess("acct", key=KEY))
    assert keyed[f"fs.azure.account.key.{HOST}"] == KEY
    assert keyed[f"fs.azure.account.auth.type.{HOST}"] == "SharedKey"
    assert "fs.azure.abfs.endpoint" not in keyed  # a real account: its own endpoint, https
    signed = hadoop_settings(out, StorageAccess("acct", sas="?sv=2024&sig=abc"))
    assert signed[f"fs.azure.sas.fixed.token.{HOST}"] == "sv=2024&sig=abc"
    assert signed[f"fs.azure.account.auth.type.{HOST}"] == "SAS"
    for settings in (keyed, signed):  # no client metrics sent to the account, nor at JVM exit
        assert settings["fs.azure.metrics.collection.enabled"] == "false"
    assert hadoop_settings(parse_output("/tmp/x"), StorageAccess("acct", key=KEY)) == {}


def test_credentials_of_another_account_are_not_used_for_the_output() -> None:
    settings = hadoop_settings(parse_output(REMOTE), StorageAccess("other", key=KEY), env={})
    assert KEY not in settings.values()
    assert settings[f"fs.azure.account.auth.type.{HOST}"] == "OAuth"


@pytest.mark.parametrize(
    ("env", "provider", "secret"),
    [
        (
            {"AZURE_FEDERATED_TOKEN_FILE": "/var/run/token", "AZURE_CLIENT_ID": "c"},
            "WorkloadIdentityTokenProvider",
            None,
        ),
        (
            {"AZURE_CLIENT_SECRET": "s3cr3t-value", "AZURE_CLIENT_ID": "c", "AZURE_TENANT_ID": "t"},
            "ClientCredsTokenProvider",
            "s3cr3t-value",
        ),
        ({}, "MsiTokenProvider", None),
    ],
)
def test_entra_id_picks_the_abfs_provider_for_what_the_environment_has(
    env: dict[str, str], provider: str, secret: str | None
) -> None:
    settings = hadoop_settings(parse_output(REMOTE), StorageAccess("acct"), env=env)
    assert settings[f"fs.azure.account.oauth.provider.type.{HOST}"].endswith("." + provider)
    secrets = {k: v for k, v in settings.items() if any(p in k for p in SECRET_SETTINGS)}
    assert list(secrets.values()) == ([secret] if secret else [])
    if provider == "ClientCredsTokenProvider":
        endpoint = settings[f"fs.azure.account.oauth2.client.endpoint.{HOST}"]
        assert endpoint == "https://login.microsoftonline.com/t/oauth2/token"


def test_azurite_is_reached_over_its_blob_endpoint_in_plain_http() -> None:
    conn = azurite_connection_string(blob_port=41234, table_port=41236)
    access = storage_access(conn)
    assert access.emulator_endpoint == "http://127.0.0.1:41234/devstoreaccount1"
    assert access.key and access.auth == "key" and access.key not in repr(access)
    out = parse_output("abfs://cfp-tables@devstoreaccount1.dfs.core.windows.net/demo")
    settings = hadoop_settings(out, access)
    assert settings["fs.azure.abfs.endpoint"] == "127.0.0.1:41234"
    assert settings["fs.azure.fns.account.service.type"] == "BLOB"
    assert settings["fs.azure.always.use.https"] == "false"
    assert delta_rs_options(out, access) == {
        "account_name": "devstoreaccount1",
        "account_key": access.key,
        "azure_storage_endpoint": "http://127.0.0.1:41234/devstoreaccount1",
        "allow_http": "true",
    }


def test_a_real_account_is_not_taken_for_an_emulator() -> None:
    conn = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY}"
    access = storage_access(conn)
    assert access.emulator_endpoint is None and access.account == "acct"
    entra = storage_access("BlobEndpoint=https://acct.blob.core.windows.net")
    assert entra.auth == "entra-id" and delta_rs_options(parse_output(REMOTE), entra) == {
        "account_name": "acct"
    }


def test_the_output_container_is_left_out_only_in_the_monitored_account() -> None:
    out = parse_output(REMOTE)
    feed = StorageAccess("acct", key=KEY)
    assert excluded_container(out, feed, feed) == "tables"
    assert excluded_container(out, StorageAccess("acct"), feed) == "tables"  # Entra ID, same
    assert excluded_container(out, feed, StorageAccess("other", key=KEY)) is None
    assert excluded_container(parse_output("/tmp/x"), feed, feed) is None
    emulated = StorageAccess("acct", key=KEY, emulator_endpoint="http://127.0.0.1:1/acct")
    other_emulator = StorageAccess("acct", key=KEY, emulator_endpoint="http://127.0.0.1:2/acct")
    assert excluded_container(out, emulated, emulated) == "tables"
    assert excluded_container(out, emulated, other_emulator) is None  # two Azurites
    assert excluded_container(out, emulated, feed) == "tables"  # one, at two addresses


def test_a_folder_in_the_old_layout_gets_a_clear_error(tmp_path: Path) -> None:
    check_layout(parse_output(str(tmp_path)))  # empty: fine
    (tmp_path / "changes" / "lease=00").mkdir(parents=True)
    with pytest.raises(PluginLoadError, match=r"older cfp .*not Delta tables"):
        check_layout(parse_output(str(tmp_path)))
    (tmp_path / "changes" / "_delta_log").mkdir()
    check_layout(parse_output(str(tmp_path)))  # a Delta table partitioned by something else
    (tmp_path / "_cfp").mkdir()
    with pytest.raises(PluginLoadError, match="give a new --output"):
        check_layout(parse_output(str(tmp_path)))


def test_the_container_is_made_at_the_blob_twin_of_the_dfs_host_or_the_emulator() -> None:
    china = parse_output("abfss://t@acct.dfs.core.chinacloudapi.cn/x")
    assert blob_endpoint(china, StorageAccess("acct")) == "https://acct.blob.core.chinacloudapi.cn"
    azurite = parse_output("abfs://t@devstoreaccount1.dfs.core.windows.net/x")
    local = StorageAccess(
        "devstoreaccount1", emulator_endpoint="http://127.0.0.1:1/devstoreaccount1"
    )
    assert blob_endpoint(azurite, local) == "http://127.0.0.1:1/devstoreaccount1"
