"""Known TensorFlow noise (one definition for the console and for failure evidence), and how the
agent turns carriage-return redraws (Keras' progress bar) into one line holding the last state."""

from __future__ import annotations

import pytest

from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.noise import explains_nothing, hidden_by_default, is_startup_noise
from worker.agent.lines import LineBuffer

#: What TF 2.21 prints at every start on a CPU host, as the demo's tasks printed it.
STARTUP = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796144568.226795   16633 port.cc:153] oneDNN custom operations are on. You may "
    "see slightly different numerical results due to floating-point round-off errors.",
    "I0000 00:00:1796144568.229799   16633 cudart_stub.cc:31] Could not find cuda drivers on your "
    "machine, GPU will not be used.",
    "E0000 00:00:1796144574.134002   16633 cuda_platform.cc:52] failed call to cuInit: INTERNAL: "
    "CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)",
    "I0000 00:00:1796144570.1   16633 cpu_feature_guard.cc:210] This TensorFlow binary is "
    "optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with "
    "the appropriate compiler flags.",
    "E0000 00:00:1796144570.2   16633 cuda_dnn.cc:8579] Unable to register cuDNN factory: "
    "Attempting to register factory for plugin cuDNN when one has already been registered",
    "E0000 00:00:1796144570.3   16633 cuda_fft.cc:485] Unable to register cuFFT factory: ...",
    "E0000 00:00:1796144570.4   16633 cuda_blas.cc:1407] Unable to register cuBLAS factory: ...",
    "W0000 00:00:1796144570.5   16633 py_utils.cc:38] TF-TRT Warning: Could not find TensorRT",
    "I1201 17:03:06.123456   16633 grpc_server_lib.cc:467] Started server with target: "
    "grpc://localhost:28362",
    # an unchanged MWMS Keras script without TF_CPP_MIN_LOG_LEVEL
    "I0000 00:00:1796147284.602723    5623 coordination_service.h:529] /job:worker/replica:0/"
    "task:0 has connected to coordination service. Incarnation: 6746463268464107920",
    "I0000 00:00:1796147285.076588    5601 generator_dataset_op.cc:213] Memory patch applied: "
    "M_TRIM_THRESHOLD=128 kb was set.",
    "W0000 00:00:1796147285.082008    5601 dataset.cc:997] Input of GeneratorDatasetOp::Dataset "
    "will not be optimized because the dataset does not implement the AsGraphDefInternal()",
]

#: Lines a person must see: the script's own, a real error, TF's warnings that matter.
MEANINGFUL = [
    "[digits worker:1] 3 worker(s), attempt 0, fresh start",
    "Traceback (most recent call last):",
    "ValueError: The `global_batch_size` 64 is not divisible by `num_replicas_in_sync` 3",
    "E0000 00:00:1796144586.229960   16942 ring_alg.cc:291] Aborting RingReduce with UNAVAILABLE: "
    "recvmsg:Connection reset by peer",
    "W0000 00:00:1796144586.2   16942 cpu_allocator_impl.cc:84] Allocation of 123 exceeds 10% of "
    "free system memory.",
    "WARNING:tensorflow:Your input ran out of data; interrupting training.",
    "test_accuracy=0.9750",
    "",
]


@pytest.mark.parametrize("line", STARTUP)
def test_tensorflows_start_up_lines_are_noise_for_the_console_and_the_evidence(line: str) -> None:
    assert is_startup_noise(line)
    assert hidden_by_default(line)
    assert explains_nothing(line)


@pytest.mark.parametrize("line", MEANINGFUL)
def test_what_a_person_must_see_is_not_hidden_from_the_console(line: str) -> None:
    assert not hidden_by_default(line)


def test_tfs_python_info_logging_is_hidden_but_its_warnings_are_shown() -> None:
    info = "INFO:tensorflow:Enabled multi-worker collective ops with available devices: [...]"
    assert hidden_by_default(info) and explains_nothing(info)
    warning = "WARNING:tensorflow:Your input ran out of data; interrupting training."
    assert not hidden_by_default(warning) and explains_nothing(warning)


def test_the_evidence_skips_any_tf_info_or_warning_but_keeps_errors_and_the_scripts_lines() -> None:
    assert explains_nothing("I0000 00:00:1796144568.226795   7 some_new_file.cc:1] anything at INFO")
    assert explains_nothing("W1201 17:03:06.123456   7 some_new_file.cc:1] anything at WARNING")
    for line in [*MEANINGFUL[:4], "test_accuracy=0.9750"]:
        assert not explains_nothing(line), line


def test_the_end_of_job_unhealthy_report_stays_off_the_console_but_in_the_evidence() -> None:
    report = [
        "E0000 00:00:1796145513.326342    3493 base_collective_executor.cc:252] "
        "BaseCollectiveExecutor::StartAbort UNAVAILABLE: Error reported from /job:worker/task:1: "
        "The following tasks are unhealthy (stopped sending heartbeats):",
        "/job:worker/replica:0/task:1",
        "/job:worker/replica:0/task:0",
        "The tasks have crashed. Check the task logs for an earlier error, or scheduler events "
        "(e.g. preemption, eviction) to debug further.",
    ]
    assert all(hidden_by_default(line) for line in report)
    assert not any(explains_nothing(line) for line in report)
    assert not hidden_by_default("see /job:worker/replica:0/task:1 for details")


def test_glog_lines_are_hidden_by_the_file_they_come_from_not_only_by_their_text() -> None:
    known = "I0000 00:00:1796144568.2   7 grpc_server_lib.cc:1] a message never seen before"
    unknown = "I0000 00:00:1796144568.2   7 my_custom_op.cc:1] a message never seen before"
    assert hidden_by_default(known)
    assert not hidden_by_default(unknown)


def test_a_sigkills_evidence_is_the_scripts_last_lines_not_13_lines_of_tf_noise() -> None:
    tail = ("step 598 loss=0.1", *STARTUP, "INFO:tensorflow:Collective all_reduce tensors: 6",
            "step 599 loss=0.1", *STARTUP[:3])
    failure = TaskFailure(task="worker:1", host="localhost", attempt=0,
                          kind=FailureKind.SIGNALLED, died_at=1.0, observed_at=1.1,
                          signal="SIGKILL", stderr_tail=tail)
    assert failure.evidence() == ["step 598 loss=0.1", "step 599 loss=0.1"]


# --- carriage returns ------------------------------------------------------------------------


def keras_epoch(states: int, width: int = 80) -> bytes:
    """What tf_keras' Progbar writes to a pipe over one epoch: each redraw backspaces over the
    previous one, returns the carriage, writes the new state; the last state ends the line."""
    out = bytearray()
    previous = 0
    for i in range(1, states + 1):
        state = f"{i}/{states} [{'=' * (i * 30 // states):<30}] - loss: {1 / i:.4f}".ljust(width)
        out += b"\b" * previous + b"\r" + state.encode()
        previous = len(state)
    return bytes(out + b"\n")


def feed_in_chunks(buffer: LineBuffer, data: bytes, size: int) -> list[bytes]:
    lines: list[bytes] = []
    for start in range(0, len(data), size):
        lines += buffer.feed(data[start:start + size])
    return lines + buffer.flush()


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
def test_a_redrawn_progress_bar_is_one_line_with_its_last_state(chunk: int) -> None:
    epoch = keras_epoch(1000)
    assert len(epoch) > 75_000  # the "one 75 KB line per epoch"
    lines = feed_in_chunks(LineBuffer(64 * 1024), epoch + b"done\n", chunk)
    assert [line.decode().rstrip() for line in lines] == [
        "1000/1000 [==============================] - loss: 0.0010", "done"]


def test_a_redrawn_line_never_holds_more_than_one_state_in_memory() -> None:
    buffer = LineBuffer(64 * 1024)
    for i in range(10_000):
        assert buffer.feed(f"\r{i:>8} of 10000".encode()) == []
        assert len(buffer._pending) <= 20
    assert buffer.feed(b"\n") == [b"    9999 of 10000"]


@pytest.mark.parametrize(("data", "expected"), [
    (b"windows line\r\n", [b"windows line"]),
    (b"a\rb\rc\n", [b"c"]),
    (b"last state\r\n", [b"last state"]),
    (b"old\rnew\r\n", [b"new"]),
    (b"tqdm 50%\rtqdm 100%\r\n", [b"tqdm 100%"]),
    (b"\r\n", [b""]),
    (b"no newline at the end\rfinal", [b"final"]),
])
def test_carriage_returns_start_the_line_over(data: bytes, expected: list[bytes]) -> None:
    for size in (1, len(data)):
        assert feed_in_chunks(LineBuffer(1024), data, size) == expected


def test_a_long_line_without_carriage_returns_is_still_cut_into_pieces() -> None:
    assert feed_in_chunks(LineBuffer(4), b"abcdefghij\n", 3) == [b"abcd", b"efgh", b"ij"]
