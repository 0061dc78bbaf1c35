"""A lost Spark Connect session told from Spark's answer to a call, on the errors PySpark raises
(the ones seen when a server was killed, and when a new one came up on its port)."""

from __future__ import annotations

import grpc
import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.errors.exceptions.base import PySparkAssertionError
from pyspark.errors.exceptions.connect import AnalysisException, SparkConnectGrpcException

from observers.builtin.spark.session.liveness import first_line, is_lost

KILLED = (
    "<_MultiThreadedRendezvous of RPC that terminated with:\n"
    "\tstatus = StatusCode.UNAVAILABLE\n"
    '\tdetails = "failed to connect to all addresses; last error: UNKNOWN: '
    'ipv4:127.0.0.1:15101: Failed to connect to remote host: Connection refused"\n'
    '\tdebug_error_string = "UNAVAILABLE:failed to connect"\n>'
)


def unavailable() -> SparkConnectGrpcException:
    return SparkConnectGrpcException(message=KILLED, grpc_status_code=grpc.StatusCode.UNAVAILABLE)


@pytest.mark.parametrize(
    "error",
    [
        unavailable(),  # no server listens any more
        PySparkRuntimeError(errorClass="NO_ACTIVE_SESSION", messageParameters={}),
        PySparkAssertionError(
            "Received incorrect server side session identifier for request. (a != b)"
        ),
        SparkConnectGrpcException(
            message="session gone", errorClass="INVALID_HANDLE.SESSION_CHANGED"
        ),
        PySparkRuntimeError(  # a query in flight when a new server came up on the port
            errorClass="RESPONSE_ALREADY_RECEIVED",
            messageParameters={"error_type": "INVALID_HANDLE.SESSION_NOT_FOUND"},
        ),
    ],
    ids=["unavailable", "no-active-session", "another-server", "session-changed", "cut-off"],
)
def test_a_session_gone_is_lost(error: Exception) -> None:
    assert is_lost(error)
    try:  # ...and so is whatever a caller made of it
        raise RuntimeError("the write failed") from error
    except RuntimeError as wrapped:
        assert is_lost(wrapped)


@pytest.mark.parametrize(
    "error",
    [
        AnalysisException(message="[PATH_NOT_FOUND] x", errorClass="PATH_NOT_FOUND"),
        SparkConnectGrpcException(message="conflict", grpc_status_code=grpc.StatusCode.INTERNAL),
        ValueError("a bug of ours"),
    ],
)
def test_spark_answering_with_an_error_is_not_a_loss(error: Exception) -> None:
    assert not is_lost(error)


def test_the_first_line_of_a_grpc_error_is_its_details() -> None:
    assert first_line(unavailable()).startswith('details = "failed to connect to all addresses')
    assert first_line(ValueError("one\ntwo")) == "one"
    assert first_line(TimeoutError()) == "TimeoutError"
