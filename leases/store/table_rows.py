"""Every row of the lease table, both ways: a lease's row, a host's row and the processor's row
(PartitionKey = processor name; RowKey = the lease token, `~host~NAME` or `~processor`). The
docs/reference/lease-schema.md is this module in prose.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from azure.data.tables import EdmType, EntityProperty

from leases.errors import LeaseCorrupt
from leases.record import HostId, Lease, LeaseToken, moves_from_text, moves_to_text
from leases.reserved_rows import (
    HOST_ROW_PREFIX,
    PROCESSOR_ROW,
    BalanceNote,
    HostReport,
    ProcessorState,
)

SCHEMA = 1


def lease_row(processor: str, lease: Lease) -> dict[str, Any]:
    return {
        "PartitionKey": processor,
        "RowKey": lease.token,
        "Schema": SCHEMA,
        "Owner": lease.owner or "",
        "Epoch": lease.epoch,
        "Version": lease.version,
        "Continuation": lease.continuation or "",
        "NextOwner": lease.next_owner or "",
        "CheckpointTime": lease.checkpoint_time,
        "CaughtUp": lease.caught_up,
        "Error": lease.error,
        "Parked": lease.parked,
        "Moves": moves_to_text(lease.moves) if lease.moves else "",
        "Gaps": moves_to_text(lease.gaps) if lease.gaps else "",
        "DeadLetters": lease.dead_letters,
        "LastEventTime": lease.last_event_time,
        "Events": EntityProperty(lease.events, EdmType.INT64),
        "EventBytes": EntityProperty(lease.event_bytes, EdmType.INT64),
        "Load": EntityProperty(float(lease.load), EdmType.DOUBLE),
    }


def lease_from_row(table: str, entity: dict[str, Any], etag: str) -> Lease:
    key = str(entity.get("RowKey", "?"))
    try:
        epoch, version = int(entity["Epoch"]), int(entity["Version"])
    except (KeyError, TypeError, ValueError):
        raise LeaseCorrupt(table, key, "Epoch or Version is missing or not an integer") from None
    try:
        moves = moves_from_text(str(entity.get("Moves") or ""))
        gaps = moves_from_text(str(entity.get("Gaps") or ""))
    except (KeyError, TypeError, ValueError):
        raise LeaseCorrupt(table, key, "Moves or Gaps is not a list of moves") from None
    when = entity.get("CheckpointTime")
    return Lease(
        token=LeaseToken(key),
        owner=HostId(entity["Owner"]) if entity.get("Owner") else None,
        epoch=epoch,
        version=version,
        continuation=str(entity["Continuation"]) if entity.get("Continuation") else None,
        next_owner=HostId(entity["NextOwner"]) if entity.get("NextOwner") else None,
        checkpoint_time=when if isinstance(when, datetime) else None,
        caught_up=bool(entity.get("CaughtUp", False)),
        error=str(entity.get("Error") or ""),
        parked=bool(entity.get("Parked", False)),
        moves=moves,
        gaps=gaps,
        dead_letters=int(entity.get("DeadLetters") or 0),
        last_event_time=last if isinstance(last := entity.get("LastEventTime"), datetime) else None,
        events=_int64(entity.get("Events")),
        event_bytes=_int64(entity.get("EventBytes")),
        load=_double(entity.get("Load")),
        etag=etag,
    )


def _int64(value: object) -> int:
    """An Edm.Int64 property (read back as an `EntityProperty`), or 0 when absent."""
    if isinstance(value, EntityProperty):
        value = value.value
    return int(value) if isinstance(value, int | float | str) and value != "" else 0


def _double(value: object) -> float:
    """An Edm.Double property, or 0.0 when absent or not a number (a row of an older version)."""
    if isinstance(value, EntityProperty):
        value = value.value
    try:
        return float(value) if isinstance(value, int | float | str) and value != "" else 0.0
    except ValueError:
        return 0.0


def host_row(processor: str, report: HostReport) -> dict[str, Any]:
    return {
        "PartitionKey": processor,
        "RowKey": HOST_ROW_PREFIX + report.name,
        "State": report.state,
        "Since": report.since,
        "Seen": report.seen,
        "Leases": report.leases,
        "ExpirySeconds": report.expiry_s,
        "Error": report.error,
        "Endpoint": report.endpoint,
        "Stuck": json.dumps(report.stuck, sort_keys=True) if report.stuck else "",
        "Note": report.note,
        "Outage": report.outage,
        "Freshness": json.dumps(report.freshness, sort_keys=True) if report.freshness else "",
    }


def host_from_row(entity: dict[str, Any]) -> HostReport:
    return HostReport(
        name=HostId(str(entity["RowKey"]).removeprefix(HOST_ROW_PREFIX)),
        state=str(entity.get("State") or "?"),
        since=entity["Since"],
        seen=entity["Seen"],
        leases=int(entity.get("Leases") or 0),
        expiry_s=float(entity.get("ExpirySeconds") or 0.0),
        error=str(entity.get("Error") or ""),
        endpoint=str(entity.get("Endpoint") or ""),
        stuck=_stuck(entity.get("Stuck")),
        note=str(entity.get("Note") or ""),
        outage=str(entity.get("Outage") or ""),
        freshness=_freshness(entity.get("Freshness")),
    )


def _json_object(text: object) -> dict[str, object]:
    """A JSON object column of a host row; a row written by another version may have none, or
    junk."""
    try:
        doc = json.loads(text) if isinstance(text, str) and text else {}
    except ValueError:
        return {}
    return {str(k): v for k, v in doc.items()} if isinstance(doc, dict) else {}


def _stuck(text: object) -> dict[str, str]:
    return {k: str(v) for k, v in _json_object(text).items()}


def _freshness(text: object) -> dict[str, float]:
    doc = _json_object(text)
    return {k: float(v) for k, v in doc.items() if isinstance(v, int | float)}


def state_row(processor: str, state: ProcessorState) -> dict[str, Any]:
    return {
        "PartitionKey": processor,
        "RowKey": PROCESSOR_ROW,
        "Paused": state.paused,
        "Since": state.since,
        "Reason": state.reason,
    }


def state_from_row(entity: dict[str, Any]) -> ProcessorState:
    since = entity.get("Since")
    return ProcessorState(
        paused=bool(entity.get("Paused", False)),
        since=since if isinstance(since, datetime) else None,
        reason=str(entity.get("Reason") or ""),
        balance=_note(entity),
    )


def note_row(processor: str, note: BalanceNote) -> dict[str, Any]:
    """The processor row's balance note, to merge into it (the rest of the row untouched)."""
    return {
        "PartitionKey": processor,
        "RowKey": PROCESSOR_ROW,
        "BalanceTarget": note.target,
        "BalanceMost": note.most,
        "BalanceUnowned": note.unowned,
    }


def _note(entity: dict[str, Any]) -> BalanceNote | None:
    values = [entity.get(k) for k in ("BalanceTarget", "BalanceMost", "BalanceUnowned")]
    if not all(isinstance(v, int) for v in values):
        return None
    target, most, unowned = (int(v) for v in values if isinstance(v, int))
    return BalanceNote(target, most, unowned)
