"""The source of the one probe pre-flight runs on every host (:mod:`launcher.preflight.probe`
says what it checks and how it is asked), apart from the rest so that the probe started early
(:mod:`launcher.preflight.early_probe`) costs the command line no import of the plan's types."""

from __future__ import annotations

from launcher.preflight.gpus import GPU_PROBE
from worker.wire.module_start import CWD_RULE

#: Lowest Python the worker package supports.
MIN_PYTHON = (3, 10)
#: What starts the probe's answer line (a login shell may print other lines first).
PROBE_TAG = "TFCLUSTER-PREFLIGHT "
#: The chief's marker file in a shared checkpoint dir is this prefix plus a random token.
MARKER_PREFIX = ".tfcluster-preflight-"

#: Written for any Python 3 (no f-strings) so that an old interpreter is reported rather than
#: failing obscurely. It first takes the workdir off ``sys.path`` as the agent and the tasks do
#: (``CWD_RULE``), so that it finds the ``worker`` they will import.
PROBE = CWD_RULE + r"""
import json, os, stat, sys
out = {"python": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable}
try:
    import worker
    out["worker"] = getattr(worker, "__file__", None) or "?"
    version = getattr(worker, "__version__", None)
    if version is not None:
        out["tfcluster"] = str(version)
except BaseException as exc:
    out["worker_error"] = "%s: %s" % (type(exc).__name__, exc)
_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tensorflow-intel")
def _dist_info():
    # the version from the name of the dist-info directory (what importlib.metadata reads),
    # without its import and its scan of every distribution: 30 ms on the path of every run
    for entry in sys.path:
        try:
            listing = [name.lower() for name in os.listdir(entry or ".")
                       if name.endswith(".dist-info")]
        except OSError:
            continue
        for dist in _DISTS:
            prefix = dist.replace("-", "_") + "-"
            for name in listing:
                if name.startswith(prefix):
                    return dist, name[len(prefix):-len(".dist-info")]
    return None
found = _dist_info()
if found is not None:
    out["tensorflow_dist"], out["tensorflow"] = found
else:
    try:
        import importlib.metadata as metadata
        for dist in _DISTS:
            try:
                out["tensorflow"] = metadata.version(dist)
                out["tensorflow_dist"] = dist
                break
            except metadata.PackageNotFoundError:
                pass
    except ImportError:
        out["tensorflow_error"] = "importlib.metadata missing"
import importlib.util, importlib.machinery
def _module_found(name):
    # a dotted module is looked for level by level without importing its packages (their
    # __init__ may import TensorFlow, or anything)
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
        for part in parts[1:]:
            if spec is None or not spec.submodule_search_locations:
                return False
            spec = importlib.machinery.PathFinder.find_spec(part, list(spec.submodule_search_locations))
    except (ImportError, ValueError):
        return False
    return spec is not None
if "tensorflow" not in out and _module_found("tensorflow"):
    out["tensorflow"] = "installed"
""" + GPU_PROBE + r"""
# what depends on the run comes last: an early probe (REQUEST "-") has done the rest by the time
# its request comes, one line on stdin
if len(sys.argv) > 1 and sys.argv[1] == "-":
    request = json.loads(sys.stdin.readline() or "{}")
else:
    request = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
missing = []
entries = request.get("entrypoints", [])
if entries:
    sys.path.insert(0, os.getcwd())  # where a task finds its own modules (and its script)
for entry in entries:
    if "script" in entry and not os.path.isfile(entry["script"]):
        missing.append(entry)
    elif "module" in entry and not _module_found(entry["module"]):
        missing.append(entry)
out["missing_entrypoints"] = missing
busy = {}
if request.get("ports"):
    import socket
for port in request.get("ports", []):
    text = str(port)
    for family, address in ((socket.AF_INET, "0.0.0.0"), (getattr(socket, "AF_INET6", None), "::")):
        if family is None:
            continue
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == getattr(socket, "AF_INET6", None):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, int(text)))
        except OSError as exc:
            busy.setdefault(text, exc.strerror or str(exc))
        finally:
            sock.close()
out["busy_ports"] = busy
marker = request.get("marker")
if marker:
    directory, token = marker["dir"], marker["token"]
    path = os.path.join(directory, ".tfcluster-preflight-" + token)
    try:
        if marker["role"] == "write":
            if not os.path.isdir(directory):
                os.makedirs(directory)
            # a fresh file, never through a name planted in the shared directory
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(token)
        else:
            # a FIFO planted at its name must not block the probe: O_NONBLOCK, then a type check
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as handle:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError("marker is not a regular file")
                if handle.read(len(token) + 1).decode("ascii", "replace") != token:
                    raise OSError("marker differs")
        if os.access(directory, os.W_OK):
            out["marker"] = "ok"
        else:
            out["marker"] = "NOT WRITABLE"
            out["marker_error"] = "checkpoint dir %s is not writable here" % directory
    except OSError as exc:
        writes = marker["role"] == "write"
        out["marker"] = "NOT WRITABLE" if writes else "NOT SHARED"
        what = "cannot write to" if writes else "does not see the marker the chief wrote in"
        out["marker_error"] = ("%s the checkpoint dir %s (%s): it must be on a filesystem "
                               "every host shares" % (what, directory, exc))
print("TFCLUSTER-PREFLIGHT " + json.dumps(out))
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)  # the answer is out: no interpreter teardown (milliseconds) before the run starts
"""
