"""What inline interpreter code (``python3 -c``, ``perl -e``, ``node -e``, ``awk '...'``) may do,
judged from its text: deleting, writing, changing permissions, starting programs, or hiding what
it does (eval, decoding, escapes). Any of these asks; the list errs towards asking."""

from __future__ import annotations

import re

_FAMILIES = {
    "python": ("python", "python2", "python3", "pypy", "pypy3", "ipython", "ipython3"),
    "perl": ("perl",),
    "ruby": ("ruby", "irb"),
    "node": ("node", "nodejs", "deno", "bun"),
    "php": ("php",),
    "lua": ("lua", "luajit"),
    "other": ("tclsh", "wish", "expect", "pwsh", "julia", "Rscript", "R", "osascript", "guile"),
    "awk": ("awk", "gawk", "mawk", "nawk", "busybox-awk"),
}
# which option introduces inline code, per family
CODE_FLAGS = {
    "python": ("-c",),
    "perl": ("-e", "-E"),
    "ruby": ("-e",),
    "node": ("-e", "--eval", "-p", "--print"),
    "php": ("-r",),
    "lua": ("-e",),
    "other": ("-e", "-c", "-Command", "--eval"),
}
_COMMON = [
    (r"\b(rmtree|unlink\w*|rmdir\w*|removedirs|remove_tree|rmSync|rm_rf|rm_r|rm_f)\b", "deletes"),
    (r"\bremove\s*\(|\b(File|Dir|FileUtils)\s*\.\s*(delete|rm\w*|unlink)", "deletes"),
    (
        r"(?<!stdout\.)(?<!stderr\.)\bwrite\w*\s*\(|\b(appendFile\w*|copyFile\w*|truncate)\b",
        "writes",
    ),
    (
        r"\b(copy|copy2|copyfile|copytree|move|rename\w*|symlink\w*|link|mkdir\w*|makedirs)\s*\(",
        "writes",
    ),
    (r"\bos\s*\.\s*replace\b|\btouch\s*\(|\bmkfifo\b|\bmknod\b|\butime\b", "writes"),
    (r"\b(chmod|chown|lchown|chgrp|fchmod)\w*\b", "changes permissions"),
    (
        r"\b(system|popen|Popen|spawn\w*|exec\w*|fork\w*|subprocess|child_process|pty|Open3)\b",
        "starts other programs",
    ),
    (r"\bkill\w*\b|\bsignal\s*\.\s*raise", "kills processes"),
    (
        r"\b(eval|compile|__import__|importlib|getattr|setattr|globals|vars|constructor)\b",
        "hides what it runs",
    ),
    (
        r"\b__(?!(version|name|file|doc|main)__)\w+__|&\s*[$\{]|\b(public_send|__send__|Kernel)\b",
        "hides what it runs",
    ),
    (
        r"\b(base64|b64decode|codecs|fromhex|unhexlify|decode|marshal|pickle|ctypes|Function)\b",
        "hides what it runs",
    ),
    (r"\bchr\s*\(|\\x[0-9a-fA-F]{2}|\\[0-7]{3}|\\u[0-9a-fA-F]{4}|\\N\{", "hides what it runs"),
    (
        r"\b(send|instance_eval|class_eval|const_get|binding|dlopen|vm|worker_threads)\b",
        "hides what it runs",
    ),
]
_FAMILY = {
    "python": [
        (
            r"\bopen\s*\([^,)]{0,300},(?!\s*(mode\s*=\s*)?[rbtU]*['\"][rbtU]*['\"]\s*[,)]|"
            r"\s*(encoding|errors|newline|buffering)\b)|\.open\s*\(\s*['\"][^'\"]{0,9}[wax+]",
            "writes",
        )
    ],
    "perl": [(r"`|\bqx\b|\bopen\b|\bsysopen\b|\brename\b", "writes or starts programs")],
    "ruby": [(r"`|%x|\bopen\b|\bIO\b|\bFile\s*\.\s*(write|open|new)", "writes or starts programs")],
    "node": [
        (
            r"\bfs\b|\bimport\s*\(|\bprocess\s*\.\s*(binding|dlopen|mainModule)|\brequire\s*\(\s*[^'\"]",
            "uses the file system or loads code",
        )
    ],
    "php": [
        (
            r"`|\bfopen\b|\bfile_put_contents\b|\bpassthru\b|\bshell_exec\b",
            "writes or starts programs",
        )
    ],
    "lua": [
        (
            r"\bio\s*\.\s*(open|popen|write)|\bos\s*\.\s*(execute|remove|rename)",
            "writes or starts programs",
        )
    ],
    "awk": [
        (r"\|\s*[\"\w$]|\|&|\bprintf?\b[^;{}]{0,300}>|\bgetline\b", "writes or starts programs")
    ],
}
_COMPILED = {
    fam: [
        (re.compile(rx), why)
        for rx, why in _FAMILY.get(fam, []) + ([] if fam == "awk" else _COMMON)
    ]
    for fam in _FAMILIES
}
_COMPILED["awk"] += [(re.compile(r"\bsystem\s*\("), "starts other programs")]


def family(name: str) -> str | None:
    """``python`` for ``python3.11``; None when ``name`` is no interpreter known here."""
    base = re.sub(r"[0-9.]+$", "", name)
    for fam, names in _FAMILIES.items():
        if name in names or base in names:
            return fam
    return None


def code_reason(name: str, code: str, dynamic: bool) -> str | None:
    """Why inline ``code`` run by interpreter ``name`` needs approval, or None."""
    fam = family(name) or "python"
    if dynamic:
        return f"runs {name} code only known when it runs"
    for pattern, what in _COMPILED[fam]:
        if m := pattern.search(code):
            return f"inline {name} code that {what} ({m.group().strip()[:40]})"
    return None
