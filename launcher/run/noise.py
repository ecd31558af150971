"""What TensorFlow prints that explains nothing: the one definition of "known TF noise".

TensorFlow writes a burst of lines at every start that no setting silences (they come before
absl's logging is initialised, so ``TF_CPP_MIN_LOG_LEVEL=2`` does not reach them): absl's preamble,
oneDNN's notice, the CPU build's CUDA probe, the CPU-instructions notice, factory registration
clashes, TF-TRT. Each task prints them once per process (twice with a warm spare), which made
them a quarter of a demo's console. Two questions are asked of a line:

- :func:`hidden_by_default`: one of those known start-up lines (:func:`is_startup_noise`), a C++
  log line (glog format, ``I0000 00:00:1796144568.226795   16633 port.cc:153] ...``) of a known
  chatty kind, or Python's ``INFO:tensorflow:`` / ``INFO:absl:`` logging (MWMS's set-up notes).
  The console leaves these out unless ``--verbose``, and also the coordination service's report,
  at the end of a job that succeeded, that the tasks which already finished "are unhealthy
  (stopped sending heartbeats)" (:func:`is_shutdown_noise`: when a task really dies, tfcluster's
  root cause says so first). The task logs keep every line.
- :func:`is_leader_gone` / :func:`continues_leader_gone`: what a task prints when the coordination
  service's leader (the chief, or worker 0) already exited: ``E0000 ...
  BaseCollectiveExecutor::StartAbort UNAVAILABLE: Failed to send RPC to coordination service`` and
  the gRPC detail lines after it (``... Connection refused``). At the end of a job that succeeded
  this is every MWMS job's last word; when a job fails it may be evidence, so the console holds
  these lines until it knows how the job ended (:mod:`launcher.output.job_end_lines`).
- :func:`explains_nothing`: start-up noise, or any TF C++ INFO/WARNING line, or a line of Python's
  ``tensorflow`` / ``absl`` INFO or WARNING logging. The root cause's "last lines of stderr" skip
  these: they never tell why a task died.
"""

from __future__ import annotations

import re

#: Messages TensorFlow prints at start-up, wherever they appear in the line.
_STARTUP_MESSAGES = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
    "Could not find cuda drivers on your machine",
    "failed call to cuInit",
    "This TensorFlow binary is optimized to use available CPU instructions",
    "Unable to register cuDNN factory",
    "Unable to register cuFFT factory",
    "Unable to register cuBLAS factory",
    "TF-TRT Warning",
    "computation placer already registered",
    "Ignore above cudart dlerror if you do not have a GPU set up",
    "Cannot dlopen some GPU libraries",
    "kernel driver does not appear to be running on this host",
    "retrieving CUDA diagnostic information for host",
)

#: Start-up messages that begin a line (the second line of the CPU-instructions notice).
_STARTUP_LINE_STARTS = ("To enable the following instructions",)

#: A TensorFlow / absl C++ log line: level, date (0000 before absl is set up), time, thread, file.
_GLOG = re.compile(r"^(?P<level>[IWEF])\d{4} \d\d:\d\d:\d+(?:\.\d+)? +\d+ (?P<file>[\w.+-]+):\d+\]")

#: Source files whose INFO / WARNING lines are start-up or routine chatter.
_CHATTY_FILES = frozenset({
    "port.cc", "cudart_stub.cc", "cpu_feature_guard.cc", "cuda_platform.cc",
    "cuda_diagnostics.cc", "cuda_executor.cc", "cuda_dnn.cc", "cuda_fft.cc", "cuda_blas.cc",
    "dso_loader.cc", "gpu_device.cc", "computation_placer.cc", "grpc_server_lib.cc",
    "coordination_service.cc", "coordination_service.h", "coordination_service_agent.cc",
    "coordination_service_agent.h", "generator_dataset_op.cc", "mlir_graph_optimization_pass.cc",
    "local_rendezvous.cc", "py_utils.cc", "collective_param_resolver_local.cc", "service.cc",
    "cpu_client.cc", "tfrt_cpu_pjrt_client.cc", "auto_shard.cc", "dataset.cc", "loader.cc",
    "device_compiler.h", "xla_device.cc", "cpu_utils.cc",
})

#: The chief's coordination service once the other tasks exited (three lines and a list of tasks).
_SHUTDOWN_MESSAGES = ("The following tasks are unhealthy (stopped sending heartbeats)",
                      "The tasks have crashed. Check the task logs for an earlier error")
_TASK_NAME_LINE = re.compile(r"^/job:\w+/replica:\d+/task:\d+$")

#: An error line of a task whose coordination service leader is gone (the leader exited).
_LEADER_GONE = ("Failed to send RPC to coordination service",
                "Failed to connect to all addresses",
                "failed to connect to all addresses")
#: Files that log it (``base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort``).
_LEADER_GONE_FILES = frozenset({"base_collective_executor.cc", "coordination_service_agent.cc"})
#: The lines gRPC adds under it: which call to which task, and the peer's error.
_LEADER_GONE_DETAIL = re.compile(
    r"^(?:Additional GRPC error information from remote target /job:\w+/replica:\d+/task:\d+"
    r" while calling /tensorflow\.CoordinationService/\w+:|:?\s*(?:UNKNOWN|UNAVAILABLE):"
    r"\s*Error received from peer)")

#: Python logging from TensorFlow and absl at INFO or WARNING, and at INFO only.
_PY_LOGGING = re.compile(r"^(?:INFO|WARNING):(?:tensorflow|absl):")
_PY_INFO = re.compile(r"^INFO:(?:tensorflow|absl):")


def is_startup_noise(line: str) -> bool:
    """TensorFlow's known start-up lines and C++ log lines of known chatty kinds: what the
    console leaves out by default."""
    if line.startswith(_STARTUP_LINE_STARTS):
        return True
    glog = _GLOG.match(line)
    if glog is not None and glog["level"] in "IW" and glog["file"] in _CHATTY_FILES:
        return True
    return any(message in line for message in _STARTUP_MESSAGES)


def is_shutdown_noise(line: str) -> bool:
    """The coordination service's "tasks are unhealthy" report, line by line."""
    return _TASK_NAME_LINE.match(line) is not None or any(m in line for m in _SHUTDOWN_MESSAGES)


def hidden_by_default(line: str) -> bool:
    """What the console leaves out unless ``--verbose``: start-up noise, the coordination
    service's end-of-job report, TF's Python INFO logging."""
    return is_startup_noise(line) or is_shutdown_noise(line) or _PY_INFO.match(line) is not None


def explains_nothing(line: str) -> bool:
    """Lines the evidence of a failure skips: start-up noise, any TF C++ INFO / WARNING line,
    TensorFlow's and absl's Python INFO / WARNING logging."""
    if is_startup_noise(line) or _PY_LOGGING.match(line):
        return True
    glog = _GLOG.match(line)
    return glog is not None and glog["level"] in "IW"


def is_leader_gone(line: str) -> bool:
    """TF's error line of a task that can no longer reach the coordination service's leader
    (``E0000 ... base_collective_executor.cc:252] BaseCollectiveExecutor::StartAbort UNAVAILABLE:
    Failed to send RPC to coordination service ...``)."""
    glog = _GLOG.match(line)
    return (glog is not None and glog["level"] == "E" and glog["file"] in _LEADER_GONE_FILES
            and any(message in line for message in _LEADER_GONE))


def continues_leader_gone(line: str) -> bool:
    """A gRPC detail line that follows :func:`is_leader_gone`'s (the call, the peer's error)."""
    return _LEADER_GONE_DETAIL.match(line) is not None
