"""An engine server as a user runs one: found on PATH (or named), started in its own process group with its log in
a file, waited for until its health endpoint answers, and stopped with the whole group. Every fault is one
``EngineError`` line: not found, port taken, exited before ready (its log's last lines and path), not ready in
time, died mid-run. Starts kept alive at once are driven in turn once every one of them is quiet
(``wait_quiet``: their process groups' CPU time from /proc)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from spectune.engines.http import Unreachable, get_text
from spectune.errors import EngineError
from spectune.masking import arg_secrets, mask_text


def find_executable(program: str, given: str | None, env_var: str, install: str) -> str:
    """The engine's executable: ``given`` (an option), else ``$env_var``, else ``program`` on PATH."""
    where, source = (given, "--engine-bin") if given else (os.environ.get(env_var), f"${env_var}")
    if where:
        p = Path(where).expanduser()
        if p.is_file() and os.access(p, os.X_OK):
            return str(p.resolve())
        found = shutil.which(where)
        if found:
            return found
        raise EngineError(f"{program} not found at '{where}' ({source}): name an executable file")
    found = shutil.which(program)
    if not found:
        raise EngineError(f"{program} not found on PATH: set {env_var} to its path or give --engine-bin "
                          f"(install: {install})")
    return found


def port_free(host: str, port: int) -> bool:
    """Whether ``port`` on ``host`` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tail(path: Path, n: int = 3) -> list[str]:
    """The last ``n`` non-empty lines of a log file (none where it cannot be read)."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return []
    return [ln[:300] for ln in lines[-n:]]


@dataclass
class Server:
    """One engine process: ``argv`` started with its output in ``log``; ready when ``health_url`` answers."""

    argv: list[str]
    log: Path
    health_url: str
    env: dict[str, str] = field(default_factory=dict)
    name: str = "engine"
    proc: subprocess.Popen | None = None

    def start(self, timeout_s: float) -> None:
        """Start and wait until healthy; stop it and raise on an early exit or a timeout."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            try:
                self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env={**os.environ, **self.env}, start_new_session=True)
            except OSError as e:
                raise EngineError(f"cannot run {self.argv[0]}: {e.strerror or e}") from None
        try:
            self._wait_ready(timeout_s)
        except BaseException:  # Ctrl-C or SIGTERM while it loads (minutes for vLLM) must not leave it running
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineError(self._exited("failed to start"))
            try:
                get_text(self.health_url, timeout=5)
                return
            except Unreachable:
                time.sleep(1.0)
            except EngineError:  # up, but not healthy yet (e.g. 503 while loading)
                time.sleep(1.0)
        raise EngineError(f"{self.name} was not ready after {timeout_s:.0f} s; its log: {self.log}"
                          + self._last_lines())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def died(self, doing: str) -> EngineError:
        """The error for an engine that stopped answering while ``doing`` (a dying process gets a moment to
        exit, so its status is the one reported)."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        return EngineError(self._exited(f"died {doing}") if not self.alive() else
                           f"{self.name} stopped answering {doing} (still running); its log: {self.log}")

    def _exited(self, what: str) -> str:
        code = self.proc.returncode if self.proc else None
        return f"{self.name} {what} (exit status {code}); its log: {self.log}" + self._last_lines()

    def _last_lines(self) -> str:
        lines = tail(self.log)  # an engine may echo its arguments (vLLM: "non-default args"): their secrets go
        return f"; last lines: {mask_text(' | '.join(lines), also=arg_secrets(self.argv))}" if lines else ""

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the whole process group, SIGTERM then SIGKILL after ``grace_s``: the engine's children too (vLLM's
        engine core), even where the process spectune started has exited already."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):  # nothing of the group is left
                return
            if self._group_gone(wait):
                return

    def _group_gone(self, wait_s: float) -> bool:
        """Whether every process of the group has exited within ``wait_s`` (the leader reaped: a zombie counts)."""
        deadline = time.monotonic() + wait_s
        while True:
            self.proc.poll()
            try:
                os.killpg(self.proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def groups_cpu_s(pgids: set[int]) -> float | None:
    """CPU seconds (user + system) used so far by the live processes of the process groups ``pgids``, from
    /proc (None where there is no /proc to read: not Linux)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return None
    total = 0
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()  # the name in (...) may hold spaces
        except OSError:  # exited meanwhile
            continue
        if len(fields) > 12 and int(fields[2]) in pgids:  # state ppid pgrp ... utime(11) stime(12)
            total += int(fields[11]) + int(fields[12])
    return total / tick


QUIET_TIMEOUT_S = 20.0  # wait_quiet's longest wait for the starts alive at once to go quiet


def wait_quiet(servers: "list[Server]", busy: float = 0.1, window_s: float = 0.5,
               timeout_s: float = QUIET_TIMEOUT_S) -> float | None:
    """Wait until ``servers`` together use under ``busy`` of one core over ``window_s``, at most ``timeout_s``; the
    cores they used over the last window where they never went quiet, else None. A vLLM 0.32.0 server's threads
    spin down for up to 1.0 CPU s after its last request: on the Emerald Rapids guest a drive of another server
    alive beside it that overlapped that spin-down ran 23-31 % slower (docs/benchmarks.md, "Engine starts alive at
    once and driven in turn")."""
    pgids = {s.proc.pid for s in servers if s.alive()}
    t0, used = time.monotonic(), None
    before = groups_cpu_s(pgids) if pgids else None
    while before is not None and time.monotonic() - t0 < timeout_s:
        time.sleep(window_s)
        now = groups_cpu_s(pgids)
        if now is None or (used := now - before) < busy * window_s:
            return None
        before = now
    return None if used is None else used / window_s
