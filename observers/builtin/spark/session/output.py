"""Where the Spark observer's tables live (`--output`), and how Spark and delta-rs reach them.

`--output` is a local folder (or `file:///folder`), or an ADLS Gen2 / Blob Storage location
`abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH` (`abfs://` for plain HTTP). The tables
are `OUTPUT/changes` and `OUTPUT/state`. `wasb://` is refused: Hadoop 3.5 (the one PySpark
4.2 bundles) has no WASB driver any more, and Delta needs a rename that fails when the target
exists, which ABFS gives and WASB never did.

Credentials come from a storage connection string's key or SAS, or else Microsoft Entra ID; they
become Hadoop settings (`hadoop_settings`) that the host sets on its Spark session at run time
(never on a process command line), and storage options of the `deltalake` package
(`delta_rs_options`). An emulator account (a loopback blob endpoint: Azurite) is reached through
ABFS over the Blob endpoint of a flat-namespace account, in plain HTTP, at that endpoint.

Pure: no I/O here, so every rule is unit-tested.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from observers.errors import PluginLoadError
from observers.options import StorageAccess

ABFS_SCHEMES = ("abfs", "abfss")
ABFS_PROVIDERS = "org.apache.hadoop.fs.azurebfs.oauth2."


def _refuse(text: str, problem: str) -> PluginLoadError:
    return PluginLoadError("spark", f"--output {text}: {problem}")


@dataclass(frozen=True, slots=True)
class Output:
    """A parsed `--output`: `uri` is `file:///abs/path` or `abfs[s]://container@host/path`."""

    uri: str
    local: Path | None = None  # a local folder
    container: str = ""  # an ABFS location: its container (file system) ...
    account: str = ""  # ... its account name ...
    host: str = ""  # ... and its host, ACCOUNT.dfs.core.windows.net
    path: str = ""  # ... and the folder in the container ("" for its root)

    @property
    def is_remote(self) -> bool:
        return self.local is None

    @property
    def changes(self) -> str:
        return self.table("changes")

    @property
    def state(self) -> str:
        return self.table("state")

    @property
    def history(self) -> str:
        return self.table("history")

    @property
    def hints(self) -> str:
        return self.table("hints")

    def table(self, name: str) -> str:
        return f"{self.uri.rstrip('/')}/{name}"

    def describe(self) -> str:
        return str(self.local) if self.local is not None else self.uri


def parse_output(text: str) -> Output:
    """`--output` as an `Output`. Errors: `PluginLoadError` saying what is wrong and what works."""
    if not text:
        raise PluginLoadError("spark", "--output is required with --observer spark")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        local = Path(parts.path if scheme == "file" else text).resolve()
        return Output(uri=local.as_uri(), local=local)
    if scheme in ("wasb", "wasbs"):
        raise _refuse(
            text,
            "wasb:// is not supported: Hadoop 3.5 has no WASB driver, and Delta's commits need a "
            "rename that fails when the target exists, which WASB never gave. Use "
            "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH (flat-namespace accounts too)",
        )
    if scheme not in ABFS_SCHEMES:
        raise _refuse(
            text,
            f"{scheme}:// is not supported: give a local folder, file:///folder or "
            "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH",
        )
    container, at, host = parts.netloc.rpartition("@")
    account, _, rest = host.partition(".")
    if not at or not container or not account or not rest.startswith("dfs."):
        raise _refuse(
            text,
            "expected abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH (the account's dfs "
            "host, also for flat-namespace accounts)",
        )
    folder = parts.path.strip("/")
    uri = f"{scheme}://{container}@{host.lower()}/{folder}".rstrip("/")
    return Output(
        uri=uri, container=container, account=account.lower(), host=host.lower(), path=folder
    )


def access_for(output: Output, access: StorageAccess | None) -> StorageAccess | None:
    """The credentials to use for `output`: `access` when it is for the output's account, else
    Entra ID for that account (None for a local folder)."""
    if not output.is_remote:
        return None
    if access is not None and access.account.lower() == output.account:
        return access
    return StorageAccess(account=output.account)


def hadoop_settings(
    output: Output, access: StorageAccess | None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The `fs.azure.*` settings that let Spark's ABFS driver read and write `output` (none for
    a local folder). Keyed by the account's host, so that other accounts are left alone.

    Entra ID picks the token provider ABFS has for what `DefaultAzureCredential` would find in
    `env` (default: the process environment): workload identity (`AZURE_FEDERATED_TOKEN_FILE`),
    a service principal's secret (`AZURE_CLIENT_SECRET`), else the managed identity."""
    access = access_for(output, access)
    if access is None:
        return {}
    env = os.environ if env is None else env
    host = output.host
    conf: dict[str, str] = {}  # (the host makes the container: `container.ensure_container`)
    if access.key:
        conf[f"fs.azure.account.auth.type.{host}"] = "SharedKey"
        conf[f"fs.azure.account.key.{host}"] = access.key
    elif access.sas:
        conf[f"fs.azure.account.auth.type.{host}"] = "SAS"
        conf[f"fs.azure.sas.fixed.token.{host}"] = access.sas.lstrip("?")
    else:
        conf.update(_entra_settings(host, env))
    # hadoop-azure 3.5 sends its own client metrics to the account, also from a JVM shutdown
    # hook, with ABFS's retries (minutes): after an outage, a JVM whose account is unreachable
    # at exit outlived its host by many minutes (seen in the tests)
    conf["fs.azure.metrics.collection.enabled"] = "false"
    if access.emulator_endpoint:
        where = urlsplit(access.emulator_endpoint)
        conf.update(
            {
                # Azurite has no DFS endpoint: ABFS talks to its Blob endpoint as to a
                # flat-namespace account, in plain HTTP, at the emulator's address
                "fs.azure.abfs.endpoint": where.netloc,
                "fs.azure.always.use.https": "false",
                "fs.azure.fns.account.service.type": "BLOB",
                "fs.azure.account.hns.enabled": "false",
                # ABFS's Apache HTTP client wants an SSL socket factory even for http://
                "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
            }
        )
    return conf


def _entra_settings(host: str, env: Mapping[str, str]) -> dict[str, str]:
    conf = {f"fs.azure.account.auth.type.{host}": "OAuth"}
    provider = f"fs.azure.account.oauth.provider.type.{host}"
    client, tenant = env.get("AZURE_CLIENT_ID", ""), env.get("AZURE_TENANT_ID", "")
    authority = env.get("AZURE_AUTHORITY_HOST", "https://login.microsoftonline.com").rstrip("/")
    if env.get("AZURE_FEDERATED_TOKEN_FILE"):
        conf[provider] = ABFS_PROVIDERS + "WorkloadIdentityTokenProvider"
        conf[f"fs.azure.account.oauth2.msi.tenant.{host}"] = tenant
        conf[f"fs.azure.account.oauth2.client.id.{host}"] = client
        conf[f"fs.azure.account.oauth2.token.file.{host}"] = env["AZURE_FEDERATED_TOKEN_FILE"]
        conf[f"fs.azure.account.oauth2.msi.authority.{host}"] = authority + "/"
    elif env.get("AZURE_CLIENT_SECRET"):
        conf[provider] = ABFS_PROVIDERS + "ClientCredsTokenProvider"
        conf[f"fs.azure.account.oauth2.client.id.{host}"] = client
        conf[f"fs.azure.account.oauth2.client.secret.{host}"] = env["AZURE_CLIENT_SECRET"]
        conf[f"fs.azure.account.oauth2.client.endpoint.{host}"] = (
            f"{authority}/{tenant}/oauth2/token"
        )
    else:
        conf[provider] = ABFS_PROVIDERS + "MsiTokenProvider"
        if client:
            conf[f"fs.azure.account.oauth2.client.id.{host}"] = client
        if tenant:
            conf[f"fs.azure.account.oauth2.msi.tenant.{host}"] = tenant
    return conf


SECRET_SETTINGS = ("fs.azure.account.key.", "fs.azure.sas.fixed.token.", "oauth2.client.secret.")
"""Prefixes and parts of the setting names above whose values are secrets."""


def delta_rs_options(output: Output, access: StorageAccess | None) -> dict[str, str]:
    """Storage options of the `deltalake` package for `output` (none for a local folder; with
    Entra ID, none: delta-rs finds the same credentials in the environment)."""
    access = access_for(output, access)
    if access is None:
        return {}
    options = {"account_name": access.account}
    if access.key:
        options["account_key"] = access.key
    elif access.sas:
        options["sas_token"] = access.sas.lstrip("?")
    if access.emulator_endpoint:
        options["azure_storage_endpoint"] = access.emulator_endpoint
        options["allow_http"] = "true"
    return options


def excluded_container(
    output: Output, access: StorageAccess | None, feed: StorageAccess | None
) -> str | None:
    """The output's container when it lies in the account whose feed the host reads: the
    tables' own writes appear in that feed, so a processor must leave them out or it would feed
    on its own output for ever (and `cfp verify` would count the tables' files as blobs).

    The same account name is the same account, except for two emulators at different endpoints
    (every Azurite is `devstoreaccount1`); one account reached at two addresses (an emulator on
    loopback for Spark, by host name for the feed) counts as the same."""
    mine = access_for(output, access)
    if mine is None or feed is None or feed.account.lower() != output.account:
        return None
    if mine.emulator_endpoint and feed.emulator_endpoint:
        return output.container if mine.emulator_endpoint == feed.emulator_endpoint else None
    return output.container
