"""Writer schemas of the change feed record, by `schemaVersion`, as the emulator writes them.

Field lists follow the service's documentation and the recorded v4 and v5 headers (see
`shared/fixtures/azure-recorded/`); v6 adds the Cold tier, the append-block event and its
fields. Readers never use these: they decode with each chunk's own header.
"""

from __future__ import annotations

from typing import Any

SUPPORTED_VERSIONS = (1, 3, 4, 5, 6)


def _enum(name: str, symbols: list[str]) -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": symbols, "default": symbols[0]}


def _optional(t: object) -> dict[str, Any]:
    return {"type": ["null", t], "default": None}


def _str(name: str) -> dict[str, Any]:
    return {"name": name, "type": "string", "default": ""}


def event_types(version: int) -> list[str]:
    symbols = [
        "UnspecifiedEventType",
        "BlobCreated",
        "BlobDeleted",
        "BlobPropertiesUpdated",
        "BlobSnapshotCreated",
        "Control",
    ]
    if version >= 4:
        symbols += ["BlobTierChanged", "BlobAsyncOperationInitiated"]
    if version >= 5:
        symbols += ["RestorePointMarkerCreated"]
    if version >= 6:
        symbols += ["AppendBlobDataUpdated"]
    return symbols


def apis(version: int) -> list[str]:
    symbols = [
        "UnspecifiedApi",
        "PutBlob",
        "PutBlockList",
        "CopyBlob",
        "DeleteBlob",
        "SetBlobMetadata",
        "ControlEvent",
        "UndeleteBlob",
        "SetBlobProperties",
        "SnapshotBlob",
    ]
    if version >= 4:
        symbols += ["SetBlobTier", "AbortCopyBlob"]
    if version >= 5:
        symbols += ["SetBlobTags", "CreateRestorePointMarker"]
    if version >= 6:
        symbols += ["AppendBlock"]
    return symbols


def tiers(version: int) -> list[str]:
    return ["UnspecifiedBlobTier", "Hot", "Cool", "Archive"] + (["Cold"] if version >= 6 else [])


def writer_schema(version: int) -> dict[str, Any]:
    """The record schema the emulator writes for `version` (1, 3, 4, 5 or 6)."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"schema version {version} is not one of {SUPPORTED_VERSIONS}")
    return {
        "type": "record",
        "name": "BlobChangeEvent",
        "namespace": "Microsoft.Storage",
        "fields": [
            {"name": "schemaVersion", "type": "long", "default": version},
            _str("topic"),
            _str("subject"),
            {"name": "eventType", "type": _enum("EventTypeEnum", event_types(version))},
            _str("eventTime"),
            _str("id"),
            {
                "name": "data",
                "type": {
                    "type": "record",
                    "name": "BlobChangeEventData",
                    "fields": _data_schema_fields(version),
                },
            },
        ],
    }


def _data_schema_fields(version: int) -> list[dict[str, Any]]:
    """The fields of the record's `data`: the part that grows with each schema version."""
    api = _enum("ApiEnum", apis(version))
    data: list[dict[str, Any]] = [
        {"name": "api", "type": api, "default": api["default"]},
        _str("clientRequestId"),
        _str("requestId"),
        _str("etag"),
        _str("contentType"),
        {"name": "contentLength", "type": "long", "default": 0},
    ]
    blob_type = _enum(
        "BlobTypeEnum", ["UnspecifiedBlobType", "BlockBlob", "PageBlob", "AppendBlob"]
    )
    data.append({"name": "blobType", "type": blob_type, "default": blob_type["default"]})
    if version >= 4:
        data += [
            {"name": "blobVersion", **_optional("string")},
            {"name": "containerVersion", **_optional("string")},
            {"name": "blobTier", **_optional(_enum("BlobTierEnum", tiers(version)))},
        ]
    data += [_str("url"), _str("sequencer")]
    if version >= 3:
        change = {
            "type": "record",
            "name": "values",
            "fields": [_str("current"), _str("previous")],
        }
        data += [
            {"name": "previousInfo", **_optional({"type": "map", "values": "string"})},
            {"name": "snapshot", **_optional("string")},
            {"name": "blobPropertiesUpdated", **_optional({"type": "map", "values": change})},
        ]
    if version >= 4:
        data.append(
            {"name": "asyncOperationInfo", **_optional({"type": "map", "values": "string"})}
        )
    if version >= 5:
        tags = {"type": "map", "values": {"type": "map", "values": "string"}}
        data += [
            {"name": "blobTagsUpdated", **_optional(tags)},
            {"name": "restorePointMarker", **_optional({"type": "map", "values": "string"})},
        ]
    if version >= 6:
        data += [
            {"name": "contentOffset", **_optional("long")},
            {"name": "createTime", **_optional("string")},
        ]
    data.append(
        {"name": "storageDiagnostics", "type": {"type": "map", "values": "string"}, "default": {}}
    )
    return data


def data_fields(version: int) -> set[str]:
    """Names of the `data` fields a record of `version` carries."""
    data = writer_schema(version)["fields"][-1]["type"]["fields"]
    return {f["name"] for f in data}
