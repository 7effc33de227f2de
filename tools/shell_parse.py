"""A small POSIX-shell lexer for the approval screen: the simple commands a command line runs,
with their words, redirections, here-documents and the text of every $(...) and `...`.

It never runs or expands anything. What only the running shell can know (a variable, a command
substitution, ``$*``) stays a `Part` of kind ``dyn`` or ``var`` for the screen to judge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

SEPARATORS = ("&&", "||", ";;&", ";;", ";&", "|&", ";", "&", "|", "(", ")", "\n")
REDIRECTIONS = ("<<<", "<<-", "<<", "&>>", "&>", ">>", ">|", ">&", "<&", "<>", ">", "<")
_WORD_END = frozenset(" \t\n;&|()<>'\"`$\\")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_FD = re.compile(r"\d+(?=[<>])")
_OPENERS = re.compile(r"\$\(|`")
_ANSI_C = re.compile(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|u[0-9a-fA-F]{1,4}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b"}


class ParseError(ValueError):
    """The text is not a command line the lexer can read with confidence."""


@dataclass(frozen=True, slots=True)
class Part:
    """A piece of a word: ``quoted`` or ``bare`` literal text (bare text is globbed), a
    variable ``var`` (its name; ``qvar`` in double quotes, not split) or ``dyn``: text known
    only when the command runs."""

    kind: str
    text: str = ""


@dataclass(slots=True)
class Word:
    parts: list[Part] = field(default_factory=list)
    raw: str = ""  # as written, for messages


@dataclass(slots=True)
class Segment:
    """One simple command: its words and redirections, and where its input comes from."""

    words: list[Word] = field(default_factory=list)
    redirects: list[tuple[str, Word]] = field(default_factory=list)
    piped: bool = False  # stdin is the previous command's output
    heredoc: bool = False  # stdin is a here-document or here-string


@dataclass(slots=True)
class Parsed:
    segments: list[Segment]
    substitutions: list[str]  # bodies of $(...), `...`, <(...) and >(...)


def parse(text: str) -> Parsed:
    return _Lexer(text).run()


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.segments = [Segment()]
        self.subs: list[str] = []
        self.word: Word | None = None
        self.start = 0
        self.redirect: str | None = None
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, quoted, strip tabs)

    def run(self) -> Parsed:
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                self.end_word()
                self.i += 1
            elif s.startswith("\\\n", self.i):
                self.i += 2
            elif c == "#" and self.word is None:
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            elif self.word is None and (m := _FD.match(s, self.i)):
                self.i = m.end()  # a file descriptor number: part of the redirection
            elif op := _starts(s, self.i, REDIRECTIONS):
                self.operator_redirect(op)
            elif (
                s.startswith("((", self.i)
                and self.word is None
                and not self.segments[-1].words
                and (body := self.arithmetic(self.i + 2)) is not None
            ):
                self.subs.extend(substitutions_in(body))  # only its $(...) run anything
            elif op := _starts(s, self.i, SEPARATORS):
                self.end_word()
                if self.redirect is not None:
                    raise ParseError("a redirection without a target")
                self.i += len(op)
                last = self.segments[-1]
                # `x | (sh)`: the subshell's first command still reads the pipe
                inherited = op == "(" and last.piped and not (last.words or last.redirects)
                self.segments.append(Segment(piped=op in ("|", "|&") or inherited))
                if op == "\n" and self.heredocs:
                    self.read_heredocs()
            else:
                self.word_part()
        self.end_word()
        if self.redirect is not None:
            raise ParseError("a redirection without a target")
        return Parsed([g for g in self.segments if g.words or g.redirects], self.subs)

    def operator_redirect(self, op: str) -> None:
        self.end_word()
        if op in ("<", ">") and self.s.startswith("(", self.i + 1):  # <(...) or >(...)
            self.begin()
            self.i += 2
            body = self.balanced()
            # >(cmd) reads what is written to it: screened as the end of a pipe
            self.subs.append(f"true | {body}" if op == ">" else body)
            self.add(Part("dyn"))
            return
        if self.redirect is not None:
            raise ParseError("a redirection without a target")
        self.redirect = op
        self.i += len(op)

    def begin(self) -> None:
        if self.word is None:
            self.word = Word()
            self.start = self.i

    def add(self, part: Part) -> None:
        assert self.word is not None
        self.word.parts.append(part)

    def end_word(self) -> None:
        word, self.word = self.word, None
        if word is None:
            return
        word.raw = self.s[self.start : self.i]
        seg = self.segments[-1]
        if self.redirect is None:
            seg.words.append(word)
            return
        op, self.redirect = self.redirect, None
        if op in ("<<", "<<-", "<<<"):
            seg.heredoc = True
        if op in ("<<", "<<-"):
            quoted = any(p.kind != "bare" for p in word.parts)
            delimiter = "".join(p.text for p in word.parts)
            self.heredocs.append((delimiter, quoted, op == "<<-"))
        seg.redirects.append((op, word))

    def read_heredocs(self) -> None:
        for delimiter, quoted, strip in self.heredocs:
            lines: list[str] = []
            while self.i < len(self.s):
                end = self.s.find("\n", self.i)
                end = len(self.s) if end < 0 else end
                line = self.s[self.i : end]
                self.i = end + 1
                if (line.lstrip("\t") if strip else line) == delimiter:
                    break
                lines.append(line)
            if not quoted:
                self.subs.extend(substitutions_in("\n".join(lines)))
        self.heredocs = []

    def word_part(self) -> None:
        s, i = self.s, self.i
        self.begin()
        c = s[i]
        if c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                raise ParseError("unbalanced quotes")
            self.add(Part("quoted", s[i + 1 : end]))
            self.i = end + 1
        elif c == '"':
            self.i += 1
            self.double_quoted()
        elif c == "\\":
            self.add(Part("quoted", s[i + 1 : i + 2]))
            self.i += 2
        elif c == "$" or c == "`":
            self.expansion()
        else:
            j = i
            while j < len(s) and s[j] not in _WORD_END:
                j += 1
            self.add(Part("bare", s[i:j]))
            self.i = j

    def double_quoted(self) -> None:
        s = self.s
        buf: list[str] = []
        while True:
            if self.i >= len(s):
                raise ParseError("unbalanced quotes")
            c = s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\" and self.i + 1 < len(s) and s[self.i + 1] in '$`"\\\n':
                buf.append(s[self.i + 1])
                self.i += 2
            elif (
                c in "$`"
                and self.i + 1 < len(s)
                and (c == "`" or s[self.i + 1] in "({_'\"@*#?$!-" or s[self.i + 1].isalnum())
            ):
                self.add(Part("quoted", "".join(buf)))
                buf = []
                self.expansion(in_quotes=True)
            else:
                buf.append(c)
                self.i += 1
        self.add(Part("quoted", "".join(buf)))

    def expansion(self, in_quotes: bool = False) -> None:
        s, i = self.s, self.i
        if s[i] == "`":
            end = i + 1
            while end < len(s) and s[end] != "`":
                end += 2 if s[end] == "\\" else 1
            if end >= len(s):
                raise ParseError("unbalanced backquotes")
            self.subs.append(re.sub(r"\\([`$\\])", r"\1", s[i + 1 : end]))
            self.add(Part("dyn"))
            self.i = end + 1
        elif s.startswith("$((", i) and (body := self.arithmetic(i + 3)) is not None:
            self.subs.extend(substitutions_in(body))  # arithmetic: only its $(...) run
            self.add(Part("dyn"))
        elif s.startswith("$(", i):
            self.i = i + 2
            self.subs.append(self.balanced())
            self.add(Part("dyn"))
        elif s.startswith("${", i):
            end = s.find("}", i)
            if end < 0:
                raise ParseError("an unclosed ${")
            inner = s[i + 2 : end]
            self.subs.extend(substitutions_in(inner))
            kind = "qvar" if in_quotes else "var"
            self.add(Part(kind, inner) if _NAME.fullmatch(inner) else Part("dyn"))
            self.i = end + 1
        elif s.startswith("$'", i) and not in_quotes:
            self.ansi_c()
        elif m := _NAME.match(s, i + 1):
            self.add(Part("qvar" if in_quotes else "var", m.group()))
            self.i = m.end()
        elif i + 1 < len(s) and (s[i + 1] in "@*#?$!-" or s[i + 1].isdigit()):
            self.add(Part("dyn"))
            self.i = i + 2
        else:
            self.add(Part("quoted" if in_quotes else "bare", "$"))
            self.i = i + 1

    def ansi_c(self) -> None:
        s, j = self.s, self.i + 2
        while j < len(s) and s[j] != "'":
            j += 2 if s[j] == "\\" else 1
        if j >= len(s):
            raise ParseError("unbalanced quotes")
        self.add(Part("quoted", _ANSI_C.sub(_unescape, s[self.i + 2 : j])))
        self.i = j + 1

    def arithmetic(self, start: int) -> str | None:
        """The body of ``((...))`` opened just before `start`, or None (position unchanged)
        when it is not closed by ``))``: then it is ``( (...) )`` or ``$( (...) )``, commands."""
        back = self.i
        self.i = start
        try:
            body = self.balanced()
        except ParseError:
            body = None
        if body is not None and self.s.startswith(")", self.i):
            self.i += 1
            return body
        self.i = back
        return None

    def balanced(self) -> str:
        """The text up to the ``)`` closing a ``(`` just consumed; quotes respected."""
        s, start, depth = self.s, self.i, 1
        while self.i < len(s):
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise ParseError("unbalanced quotes")
                self.i = end
            elif c == '"':
                self.i += 1
                while self.i < len(s) and s[self.i] != '"':
                    self.i += 2 if s[self.i] == "\\" else 1
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return s[start : self.i - 1]
            self.i += 1
        raise ParseError("unbalanced parentheses")


def substitutions_in(text: str) -> list[str]:
    """The $(...) and `...` bodies inside text that is not a command (a here-document)."""
    out: list[str] = []
    lexer = _Lexer(text)
    while m := _OPENERS.search(text, lexer.i):
        lexer.i = m.start()
        lexer.word = None
        lexer.begin()
        try:
            lexer.expansion(in_quotes=True)
        except ParseError:
            out.append(text[m.start() :])  # unreadable: screened as is, and refused there
            break
    return out + lexer.subs


def _starts(s: str, i: int, options: tuple[str, ...]) -> str | None:
    for op in options:
        if s.startswith(op, i):
            return op
    return None


def _unescape(m: re.Match[str]) -> str:
    body = m.group(1)
    if body[0] in "xu" and len(body) > 1:
        return chr(int(body[1:], 16))
    if body[0].isdigit():
        return chr(int(body, 8))
    return _SIMPLE_ESCAPES.get(body, body)
