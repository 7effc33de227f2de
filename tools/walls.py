"""The walls a tool process starts inside: `python -I -S walls.py SPEC -- ARGV` builds them
around itself (mounts in its namespace, loopback, Landlock), then execs ARGV. Standard library
only, run as a file (no site, no package import), so it starts in about 10 ms."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import stat
import struct
import sys

# Syscall numbers are the same on every architecture that has Landlock (asm-generic table).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 32, 4096, 16384
# Per-mount flags a remount must repeat: in a user namespace the kernel refuses to clear them.
_KEPT_FLAGS = {
    "nosuid": 2,
    "nodev": 4,
    "noexec": 8,
    "noatime": 1024,
    "nodiratime": 2048,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
}

_WRITE_FILE = 1 << 1
_TRUNCATE = 1 << 14  # ABI 3
# Every right that changes the filesystem: what the walls handle (and so deny by default).
_CHANGES_BY_ABI = {
    1: (1 << 1) | sum(1 << bit for bit in range(4, 13)),  # write, remove, make anything
    2: 1 << 13,  # refer: link or rename across directories
    3: _TRUNCATE,
}
NET_ABI = 4  # the first ABI that handles TCP
_NET_TCP = (1 << 0) | (1 << 1)  # bind, connect
_SCOPES = (1 << 0) | (1 << 1)  # abstract Unix sockets, signals (ABI 6)
# Files a command may write outside its workspace: the sinks every shell uses.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts")


def abi() -> int:
    """The kernel's Landlock ABI version, 0 when it has none (or it is disabled)."""
    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(0, int(version))


def confine(writable: list[str], *, deny_tcp: bool, scope: bool) -> int:
    """Deny every filesystem change outside `writable` (and the device sinks) to this process
    and all it will start; with `deny_tcp`, every TCP bind and connect; with `scope`, signals
    and abstract Unix sockets reaching outside. Returns the ABI used (0: nothing applied)."""
    version = abi()
    if version == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    handled = sum(bits for level, bits in _CHANGES_BY_ABI.items() if version >= level)
    net = _NET_TCP if deny_tcp and version >= NET_ABI else 0
    scoped = _SCOPES if scope and version >= 6 else 0
    attr = struct.pack("=QQQ", handled, net, scoped)
    size = 24 if version >= 6 else 16 if version >= 4 else 8
    ruleset = libc.syscall(_CREATE_RULESET, attr[:size], ctypes.c_size_t(size), 0)
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for path in writable:
            _allow(libc, ruleset, path, handled)
        device_rights = _WRITE_FILE | (_TRUNCATE if version >= 3 else 0)
        for path in DEVICES:
            _allow(libc, ruleset, path, device_rights)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return version


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    """Allow `rights` beneath `path`; a path that does not exist is skipped (nothing to allow)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):  # a file takes only the rights that apply to files
            rights &= _WRITE_FILE | _TRUNCATE
        attr = struct.pack("=Qi", rights, fd)
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, attr, 0) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
    finally:
        os.close(fd)


def loopback_up() -> None:
    """Bring up `lo` in a fresh network namespace, so a command can talk to its own servers."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


class SetupError(Exception):
    """A wall could not be built: the command is not run."""


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    enc = [None if x is None else x.encode() for x in (source, target, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        err = ctypes.get_errno()
        raise SetupError(f"mount {source} on {target}: {os.strerror(err)}")


def hide(path: str) -> None:
    """Cover a directory with an empty tmpfs, a file with /dev/null."""
    if os.path.isdir(path):
        _mount("hermes-hidden", path, "tmpfs", 0, "size=64k,mode=0755")
    elif os.path.lexists(path):
        _mount("/dev/null", path, None, _MS_BIND, None)


def build_mounts(spec: dict[str, object]) -> None:
    """In a fresh mount namespace: cover what is hidden and the shared scratch places, put back
    what must stay in view (opened before anything was covered), hide again what lies inside."""
    keep = {}
    for path in _strings(spec, "put_back"):
        keep[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    read_only = set(_strings(spec, "read_only"))
    for path in _strings(spec, "hide"):
        hide(path)
    for path in _strings(spec, "tmp"):
        _mount("hermes-tmp", path, "tmpfs", 0, f"size={spec['tmp_size']},mode=1777")
    for path, fd in sorted(keep.items(), key=lambda item: len(item[0])):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600))
        _mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND, None)
        if path in read_only:
            # back under a scratch place the Landlock rule lets it write beneath: read-only
            # by the mount itself, or the interpreter and this code would be writable
            _mount("none", path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY, None)
        os.close(fd)
    for path in _strings(spec, "hide_inside"):
        hide(path)
    freeze(_strings(spec, "writable"))


def freeze(writable: list[str]) -> None:
    """Every mount read-only but the `writable` places: Landlock governs what files hold, not
    their mode, owner or times (chmod, chown, touch); a read-only mount refuses those too. Each
    writable place becomes a mount of its own first, so it stays writable when its parent does
    not. A mount that cannot be remounted is left to Landlock."""
    for path in writable:
        if os.path.exists(path):
            _mount(path, path, None, _MS_BIND | _MS_REC, None)
    done = set()
    for point, options, fstype in _mounts():
        if point in done or fstype == "proc" or any(_beneath(point, w) for w in writable):
            continue
        done.add(point)
        flags = sum(bit for name, bit in _KEPT_FLAGS.items() if name in options)
        try:
            _mount("none", point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags, None)
        except SetupError:
            pass


def _mounts() -> list[tuple[str, set[str], str]]:
    """(mount point, per-mount options, file system type) of each mount, parents first."""
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as lines:
        for line in lines:
            fields = line.split()
            fstype = fields[fields.index("-") + 1]
            found.append((_unescape(fields[4]), set(fields[5].split(",")), fstype))
    return found


def _unescape(field: str) -> str:
    """Mountinfo writes a space, tab, newline and backslash in a path as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _beneath(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _strings(spec: dict[str, object], key: str) -> list[str]:
    value = spec.get(key, [])
    return [str(v) for v in value] if isinstance(value, list) else []


def main(argv: list[str]) -> None:
    """SPEC is JSON: {"mounts", "cwd", "hide", "tmp", "tmp_size", "put_back", "read_only",
    "hide_inside" (the mounts, in a namespace only), "loopback", "confine", "writable",
    "deny_tcp", "scope"}. Asked to `confine`, a kernel without Landlock is an error, not a
    pass."""
    spec, command = json.loads(argv[1]), argv[3:]
    try:
        if spec.get("mounts"):
            build_mounts(spec)
        if spec.get("cwd"):
            os.chdir(spec["cwd"])
        if spec.get("loopback"):
            loopback_up()
        used = 0
        if spec.get("confine"):
            used = confine(spec["writable"], deny_tcp=spec["deny_tcp"], scope=spec["scope"])
    except (OSError, SetupError) as exc:
        sys.exit(f"hermes-walls: {exc}")
    if used == 0 and spec.get("confine"):
        sys.exit("hermes-walls: this kernel has no Landlock; refusing to run unconfined")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
