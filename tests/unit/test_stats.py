"""Execute records and CUPTI counts read back from Triton logs of both log formats."""

from triton_ort.runtime.copy_counter import cupti_counts_from_log
from triton_ort.runtime.stats import ExecuteStats, RunnerStats

RECORD = ExecuteStats(2, ["cuda:0"], 1, 0, 1, True, {"bind": 1.5, "ort_run": 80.0})


def escaped(message: str) -> str:
    """How Triton 2.51 writes a python-backend message: quoted, its quotes escaped."""
    return 'I1130 12:00:00.100 7 model.py:99] "' + message.replace('"', '\\"') + '"'


def plain(message: str) -> str:
    """How Triton 2.41 writes it."""
    return "I1130 12:00:00.100 7 model.py:99] " + message


def test_execute_records_round_trip_through_both_log_formats() -> None:
    log = "\n".join([plain("loaded"), plain(RECORD.log_line()), escaped(RECORD.log_line())])
    assert ExecuteStats.from_log(log) == [RECORD, RECORD]


def test_cupti_counts_are_read_from_both_log_formats() -> None:
    message = 'host<->device copies (CUPTI): {"HtoD": 1, "DtoH": 0} [\'Memcpy HtoD (Pinned -> Device)\']'
    assert cupti_counts_from_log(plain(message) + "\n" + escaped(message)) == [{"HtoD": 1, "DtoH": 0}] * 2


def test_a_record_is_the_difference_of_two_snapshots() -> None:
    before = RunnerStats(ort_runs=3, host_to_device_copies=1, bind_seconds=0.001)
    after = RunnerStats(ort_runs=4, host_to_device_copies=2, device_to_host_copies=1, host_output_runs=1)
    after.bind_seconds = 0.0015
    record = ExecuteStats.between(before, after, requests=1, input_devices=["cpu"], steps_us={})
    assert (record.ort_runs, record.host_to_device_copies, record.device_to_host_copies) == (1, 1, 1)
    assert record.outputs_on_host and record.steps_us["bind"] == 500.0
