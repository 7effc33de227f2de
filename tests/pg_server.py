"""A throwaway PostgreSQL server of a test's own (its data and socket in a temporary directory),
for tests that stop it, freeze it or start it again without touching the shared one."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path


def pg_bin() -> Path | None:
    """The newest installed server's bin directory (CI installs Debian's `postgresql`)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _as_other_user() -> list[str]:
    """The prefix that runs a command as a user PostgreSQL accepts: it refuses to run as root.
    Inside the tests' namespace (`unshare -rn`) only root is mapped, so `runuser` cannot switch;
    a nested user namespace mapping our root to an ordinary uid can, on the real host too."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare"):
        prefix = ["unshare", "-U", "--map-user=1000", "--map-group=1000"]
        if subprocess.run([*prefix, "true"], capture_output=True, timeout=10).returncode == 0:
            return prefix
    return ["runuser", "-u", "postgres", "--"]


class ThrowawayPostgres:
    """`initdb` in ``root``, then `pg_ctl` start / stop / freeze / thaw at will (blocking calls:
    an async test runs them in a thread, its loop runs the gateway)."""

    def __init__(self, bindir: Path) -> None:
        # not under pytest's tmp_path: a socket path must fit in 107 bytes, and the directory
        # must be reachable by the server's user
        self.root, self.bin = Path(tempfile.mkdtemp(prefix="hermes-pg.")), bindir
        self.data, self.log = self.root / "data", self.root / "log"
        self.prefix = _as_other_user()
        self._frozen: list[int] = []

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://hermes@/postgres?host={self.root}"

    def _run(self, *argv: str) -> None:
        cmd = [*self.prefix, str(self.bin / argv[0]), *argv[1:]]
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        if not self.data.exists():
            self.root.chmod(0o777)  # the server's user writes its socket here
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "hermes")
        options = f"-k {self.root} -c listen_addresses=''"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-o", options, "start")

    def stop(self) -> None:
        self.thaw()
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def pids(self) -> list[int]:
        """The postmaster and its children (backends, checkpointer...)."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")"
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                    children.append(int(stat.parent.name))
        return [postmaster, *children]

    def freeze(self) -> None:
        """SIGSTOP every server process: a host gone silent (a partition, a hung machine) and
        not a refused connection: connects and queries hang rather than fail."""
        self._frozen = self.pids()
        for pid in self._frozen:
            os.kill(pid, signal.SIGSTOP)

    def close(self) -> None:
        """Stop the server (if it runs) and remove its files."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def thaw(self) -> None:
        for pid in self._frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self._frozen = []
