"""The Java side of the JVM-based text benchmarks (TextWorldExpress, ScienceWorld): one JVM per jar and process.

Both libraries drive a Scala simulator through py4j. Their Python wrappers (``TextWorldExpressEnv`` 1.1.0,
``ScienceWorldEnv`` 1.2.3) start one JVM per env object and take no shared gateway, so a run of 64 training envs
and 128 evaluation envs would hold about 192 JVMs (about 79 MB resident each before their heaps grow). Here an
env asks :func:`acquire` for the jar's gateway instead and makes its own simulator object in it (the jar's
``PythonInterface``, which keeps all of one game's state; instances share nothing):

- **One JVM per jar and process**, started on first use with a capped heap (``-Xmx``) and the serial collector
  (a few envs per core; a parallel collector's threads and reserves buy nothing here).
- **Closed with its envs.** Each env holds a :class:`Lease`; ``Lease.release`` (the env's ``close``) drops the
  env's simulator object from the gateway, and the last lease shuts the JVM down. An ``atexit`` hook closes
  what is left.
- **Never left behind.** py4j starts the JVM with ``--die-on-broken-pipe``: the JVM exits when its stdin, a pipe
  from this process, closes. That happens when this process ends in any way, SIGKILL included.
- **Fork-safe.** A gateway belongs to the process that started it: a forked child (``AsyncVectorEnv``'s
  workers, joblib's) that builds an env starts its own JVM instead of talking through its parent's socket.
- **Without Java**, :func:`require_java` raises one line that names the fix (:data:`JAVA_FIX`).
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from gigpo_lab.errors import ConfigError

#: The oldest Java the two jars run on (they are built for Java 11).
MIN_JAVA = 11
#: What to do when Java is missing or too old: the one line every Java error ends with.
JAVA_FIX = f"install a Java runtime >= {MIN_JAVA} (Debian/Ubuntu: apt-get install default-jre-headless)"
#: JVM options besides the heap cap: the serial collector.
JVM_OPTIONS = ("-XX:+UseSerialGC",)


class JavaMissing(ConfigError):
    """No Java runtime, or one older than :data:`MIN_JAVA`: one line naming the fix."""


class SimulatorCrash(RuntimeError):
    """The JVM under an env died or stopped answering: one line naming the benchmark, game and seed."""


def java_executable() -> str | None:
    """The ``java`` py4j starts: ``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        return path if os.access(path, os.X_OK) else None
    return shutil.which("java")


@lru_cache(maxsize=8)
def _java_major(java: str) -> int | None:
    """The major version ``java -version`` reports (``17`` for ``17.0.15``, ``8`` for ``1.8.0_402``), or None."""
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not found:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major


def require_java(benchmark: str) -> str:
    """The ``java`` executable, or a one-line :class:`JavaMissing` naming ``benchmark`` and the fix."""
    java = java_executable()
    if java is None:
        raise JavaMissing(
            f"{benchmark} needs Java, and no java was found on PATH or in JAVA_HOME: {JAVA_FIX}"
        )
    major = _java_major(java)
    if major is None or major < MIN_JAVA:
        seen = "an unreadable version" if major is None else f"Java {major}"
        raise JavaMissing(f"{benchmark} needs Java >= {MIN_JAVA}, and {java} is {seen}: {JAVA_FIX}")
    return java


@dataclass
class _Gateway:
    """One running JVM: its py4j gateway, its process, and the leases on it."""

    gateway: Any
    process: subprocess.Popen
    pid: int  # the Python process that started it
    leases: int = 0
    heap_mb: int = 0


_LOCK = threading.Lock()
_GATEWAYS: dict[str, _Gateway] = {}


def _start(jar: str, heap_mb: int, benchmark: str) -> _Gateway:
    """Start the JVM for ``jar`` with a heap of at most ``heap_mb`` MB and connect a gateway to it."""
    from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

    java = require_java(benchmark)
    options = [f"-Xmx{heap_mb}m", *JVM_OPTIONS]
    port, process = launch_gateway(
        classpath=jar,
        die_on_exit=True,
        javaopts=options,
        java_path=java,
        return_proc=True,
        cwd=os.path.dirname(jar),  # the jars read their data files from their own folder
    )
    gateway = JavaGateway(
        gateway_parameters=GatewayParameters(port=port, auto_field=True), java_process=process
    )
    return _Gateway(gateway, process, os.getpid(), heap_mb=heap_mb)


def _stop(entry: _Gateway) -> None:
    """Shut a JVM down and wait for its process (killed after 5 s)."""
    try:
        entry.gateway.shutdown()
    except Exception:  # noqa: S110 - a JVM that already died cannot be shut down
        pass
    if entry.process.poll() is None:
        try:
            entry.process.stdin.close()  # --die-on-broken-pipe: the JVM exits on EOF
        except OSError:
            pass
        try:
            entry.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            entry.process.kill()
            entry.process.wait()


@dataclass
class Lease:
    """One env's hold on its jar's JVM: ``jvm`` (py4j's ``gateway.jvm``, where the simulator classes live),
    ``track`` (remember a Java object to drop on release) and ``release`` (once; the last one stops the JVM)."""

    jar: str
    entry: _Gateway
    objects: list[Any] = field(default_factory=list)
    released: bool = False

    @property
    def jvm(self) -> Any:
        return self.entry.gateway.jvm

    @property
    def pid(self) -> int:
        """The JVM's process id."""
        return self.entry.process.pid

    def alive(self) -> bool:
        return self.entry.process.poll() is None

    def track(self, java_object: Any) -> Any:
        """Keep ``java_object`` to drop from the gateway on release; returns it."""
        self.objects.append(java_object)
        return java_object

    def release(self) -> None:
        """Drop this env's Java objects; the last lease of a JVM stops it. Idempotent."""
        if self.released:
            return
        self.released = True
        if self.entry.pid != os.getpid():
            return  # a forked child's copy of its parent's gateway: the parent owns that JVM
        if self.alive():
            for obj in self.objects:
                try:
                    self.entry.gateway.detach(obj)
                except Exception:  # noqa: S110 - a JVM that just died has nothing to detach
                    pass
        self.objects.clear()
        with _LOCK:
            self.entry.leases -= 1
            if self.entry.leases <= 0:
                _stop(self.entry)
                if _GATEWAYS.get(self.jar) is self.entry:
                    del _GATEWAYS[self.jar]


def acquire(jar: str, heap_mb: int, benchmark: str) -> Lease:
    """A lease on this process's JVM for ``jar``, started (with ``-Xmx{heap_mb}m``) if none runs or it died.

    ``heap_mb`` is the heap of the whole JVM, shared by every env of the process; a JVM already running keeps
    the heap it started with (the first env's).
    """
    with _LOCK:
        entry = _GATEWAYS.get(jar)
        if entry is None or entry.pid != os.getpid() or entry.process.poll() is not None:
            entry = _GATEWAYS[jar] = _start(jar, heap_mb, benchmark)
        entry.leases += 1
        return Lease(jar, entry)


def running_jvms() -> dict[str, int]:
    """{jar: JVM process id} of this process's live JVMs."""
    with _LOCK:
        return {
            jar: e.process.pid
            for jar, e in _GATEWAYS.items()
            if e.pid == os.getpid() and e.process.poll() is None
        }


@atexit.register
def _stop_all() -> None:
    with _LOCK:
        for jar, entry in list(_GATEWAYS.items()):
            if entry.pid == os.getpid():
                _stop(entry)
            del _GATEWAYS[jar]


def crash_guard(benchmark: str, describe: str):
    """A context manager that turns py4j's errors (a dead or hung JVM) into a one-line :class:`SimulatorCrash`
    naming ``benchmark`` and ``describe`` (the game and the seed)."""
    return _CrashGuard(benchmark, describe)


class _CrashGuard:
    def __init__(self, benchmark: str, describe: str) -> None:
        self.benchmark, self.describe = benchmark, describe

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if err is None:
            return False
        from py4j.protocol import Py4JError

        if isinstance(err, Py4JError | ConnectionError | EOFError | BrokenPipeError):
            first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
            raise SimulatorCrash(
                f"{self.benchmark}: the Java simulator failed on {self.describe} ({type(err).__name__}: {first})"
            ) from err
        return False
