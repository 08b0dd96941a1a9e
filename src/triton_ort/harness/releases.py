"""What differs between the Triton releases the project runs on, in one table keyed by server version.

Tests assert the property that matters (the status class, a message that names the input or the model, the
neighbours answered, the server still ready) and take from here only what a release words or codes its own
way. The local server is 2.41 (nvidia-pytriton 0.5.0 = release 23.12); the GPU test host runs 2.51
(nvidia-pytriton 0.7.0 = release 24.10). Every entry cites the upstream source that decides it.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from typing import Literal

# Triton's error codes as a test names them (TRITONSERVER_Error_Code without its prefix).
ErrorCode = Literal["INVALID_ARG", "INTERNAL", "NOT_FOUND", "UNAVAILABLE"]

# server src/grpc/grpc_utils.cc GrpcStatusUtil::CodeToStatus, the same in r23.12 and r24.10.
_GRPC_STATUS: dict[ErrorCode, str] = {
    "INVALID_ARG": "StatusCode.INVALID_ARGUMENT",
    "INTERNAL": "StatusCode.INTERNAL",
    "NOT_FOUND": "StatusCode.NOT_FOUND",
    "UNAVAILABLE": "StatusCode.UNAVAILABLE",
}
# server src/http_server.cc HttpCodeFromError (r24.01 and later): the HTTP status follows the error code.
_HTTP_STATUS: dict[ErrorCode, str] = {
    "INVALID_ARG": "400",
    "INTERNAL": "500",
    "NOT_FOUND": "404",
    "UNAVAILABLE": "503",
}


@dataclass(frozen=True)
class Release:
    """One Triton release's behaviour where the project's tests meet a difference."""

    version: tuple[int, int]
    http_status_follows_error_code: bool
    """False up to 2.41 (23.12): RETURN_AND_RESPOND_IF_ERR and the infer reply send EVHTP_RES_BADREQ (400)
    for every error (server r23.12 src/http_server.cc:65-72, :4105). True from 2.42 (24.01): HttpCodeFromError
    maps INTERNAL to 500 (a JSON body that cannot be parsed: TRITONJSON_STATUSRETURN is INTERNAL,
    src/http_server.cc:44), NOT_FOUND to 404 (an unknown or unloaded model: core
    src/model_repository_manager/model_lifecycle.cc GetModel), UNAVAILABLE to 503 (r24.10 :98-121)."""
    checks_input_byte_size: bool
    """From 2.47 (24.06, core#350) core refuses a tensor whose payload does not match its shape: "input byte
    size mismatch for input '<name>' ..." (core r24.10 src/infer_request.cc:1218-1225, INVALID_ARG)."""
    negative_dimension_grpc: tuple[frozenset[str], str]
    """The gRPC status(es) and the message fragment for a raw request with a -1 dimension. 2.41 lets it
    through to the python backend, which reads it as 2**32 - 1 rows: "batch size ..."; from 2.47 the byte
    size check above refuses it first, naming the input."""
    carries_bf16: bool
    """From 2.49 (24.08) the python backend carries BF16 tensors through DLPack (python_backend 2b12abe,
    r24.08 src/pb_stub_utils.cc, src/pb_tensor.cc); before, every request with a BF16 tensor is refused
    "TYPE_BF16 not currently supported." (r23.12 src/pb_stub_utils.cc:170-171), so the load is refused
    (triton_ort.model.load_checks.check_python_backend_types)."""
    restarts_killed_stub: bool
    """2.41: a dead stub is restarted on the next execute ("Stub process is unhealthy and it will be
    restarted", python_backend r23.12 src/python_be.cc:2405-2430). 2.51: the restart is gone from
    TRITONBACKEND_ModelInstanceExecute ("TODO: Implement restart", r24.10 src/python_be.cc:2291-2293); every
    later request is answered INTERNAL "Stub process is not healthy" (:1058-1061) until the model reloads."""

    answers_through_response_sender: bool
    """From 2.47 (24.06, python_backend#364 "Add support for response sender in the default mode") a
    non-decoupled model's execute may return None and answer each request later through its response sender
    with the FINAL flag (r24.10 src/pb_stub.cc ProcessReturnedResponses). 2.41 refuses any return but a list:
    "Expected a list in the execute return, found type '<class 'NoneType'>'." (r23.12 src/pb_stub.cc:775)."""

    def status(self, protocol: str, code: ErrorCode) -> str:
        """The status a client sees for an error of `code`: an HTTP code ('400') or 'StatusCode.X'."""
        if protocol == "grpc":
            return _GRPC_STATUS[code]
        return _HTTP_STATUS[code] if self.http_status_follows_error_code else "400"

    def statuses(self, code: ErrorCode) -> frozenset[str]:
        """The statuses of `code` over HTTP and gRPC, for a check that sends over both."""
        return frozenset({self.status("http", code), self.status("grpc", code)})


def _release(version: tuple[int, int]) -> Release:
    return Release(
        version=version,
        http_status_follows_error_code=version >= (2, 42),
        checks_input_byte_size=version >= (2, 47),
        negative_dimension_grpc=(
            (frozenset({"StatusCode.INVALID_ARGUMENT"}), "input byte size mismatch")
            if version >= (2, 47)
            else (frozenset({"StatusCode.INVALID_ARGUMENT", "StatusCode.INTERNAL"}), "batch size")
        ),
        restarts_killed_stub=version < (2, 47),
        carries_bf16=version >= (2, 49),  # load_checks.BF16_FIRST_RELEASE (harness imports no torch)
        answers_through_response_sender=version >= (2, 47),
    )


def release_for(server_version: str) -> Release:
    """The release behind a `server_version` string as the server's metadata gives it ('2.41.0')."""
    try:
        major, minor = (int(part) for part in server_version.split(".")[:2])
    except ValueError:
        raise ValueError(f"server version {server_version!r} is not MAJOR.MINOR[.PATCH]") from None
    return _release((major, minor))


def server_release(http_url: str) -> Release:
    """The release of the server at `http_url` (host:port), from its metadata (GET /v2)."""
    with urllib.request.urlopen(f"http://{http_url}/v2", timeout=10) as reply:
        return release_for(str(json.load(reply)["version"]))
