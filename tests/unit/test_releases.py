"""The per-release expectation table: what 2.41 (local, CI) and 2.51 (GPU host) answer their own way."""

from __future__ import annotations

import pytest

from triton_ort.harness.releases import ErrorCode, release_for


def test_http_answers_every_error_400_up_to_2_41_and_by_error_code_after() -> None:
    old, new = release_for("2.41.0"), release_for("2.51.0")
    codes: tuple[ErrorCode, ...] = ("INVALID_ARG", "INTERNAL", "NOT_FOUND", "UNAVAILABLE")
    assert {old.status("http", code) for code in codes} == {"400"}
    assert [new.status("http", code) for code in codes] == [
        "400",
        "500",
        "404",
        "503",
    ]


def test_grpc_status_follows_the_error_code_in_both() -> None:
    for version in ("2.41.0", "2.51.0"):
        assert release_for(version).status("grpc", "NOT_FOUND") == "StatusCode.NOT_FOUND"
        assert release_for(version).statuses("INVALID_ARG") >= {"StatusCode.INVALID_ARGUMENT"}


def test_stub_restart_and_byte_size_check_change_at_2_47() -> None:
    assert release_for("2.46.0").restarts_killed_stub and not release_for("2.46.0").checks_input_byte_size
    assert not release_for("2.47.0").restarts_killed_stub and release_for("2.47.0").checks_input_byte_size
    # the response sender on non-decoupled models came in the same release (python_backend#364, r24.06)
    assert not release_for("2.46.0").answers_through_response_sender
    assert release_for("2.47.0").answers_through_response_sender
    assert release_for("2.51.0").negative_dimension_grpc[1] == "input byte size mismatch"


def test_a_version_that_is_not_a_version_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"'twenty' is not MAJOR\.MINOR"):
        release_for("twenty")


def test_bf16_is_carried_from_2_49_as_the_load_check_has_it() -> None:
    """The table and the load's check (triton_ort.model.load_checks, which the harness does not import: it
    imports torch) name the same first release."""
    from triton_ort.cli.config import parse_triton_version
    from triton_ort.model.load_checks import BF16_FIRST_RELEASE

    assert not release_for("2.48.0").carries_bf16 and release_for("2.49.0").carries_bf16
    assert parse_triton_version("24.08") == BF16_FIRST_RELEASE == release_for("2.49.0").version
    assert [parse_triton_version(v) for v in ("23.12", "2.41.0", "24.10", "2.51")] == [
        (2, 41),
        (2, 41),
        (2, 51),
        (2, 51),
    ]
    with pytest.raises(ValueError, match=r"'r23\.12' is not a Triton version"):
        parse_triton_version("r23.12")
