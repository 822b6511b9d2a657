"""Gitignore-style patterns, matched in time linear in the pattern and the path.

``.gitignore`` files and ``exclude`` are untrusted text: a regular expression made of a
pattern such as ``a*a*a*...*b`` backtracks for hours on a long file name, and ``[z-a]`` does
not compile. Here a pattern is split at ``/`` into component globs and ``**``; each glob is
split at its ``*`` runs into chunks of fixed length (a literal, ``?`` or a ``[...]`` class per
character), and a component is matched by placing each chunk at its leftmost place after the
one before (correct for fixed-length chunks, no backtracking: O(component x glob)). The
components of a path are matched against the globs and ``**`` by a set of states (an NFA),
O(components x segments) glob tests.

What a pattern means is git's (as ``pathspec``'s ``GitIgnoreSpec`` reads it): blank lines and
``#`` comments are skipped, ``!`` negates, a trailing ``/`` matches folders only, a pattern
with no ``/`` but a trailing one matches at any depth, ``**`` matches any number of folders;
a path matches when it or a folder above it does, and the last pattern that matches the path
itself wins over those that match a folder above it. A range written backwards (``[z-a]``) or
a trailing ``\\`` is a :class:`PatternError`; an unclosed ``[`` makes the pattern match
nothing, as in git.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: the folder wildcard among a pattern's segments
GLOBSTAR = "**"


class PatternError(ValueError):
    """A pattern that cannot be read (a backwards range, a trailing backslash)."""


class _Unclosed(Exception):
    """An unclosed ``[``: git discards the pattern."""


def _class_char(c: str) -> str:
    return "\\" + c if c in "\\]^-[" else c


def _bracket(seg: str, i: int) -> tuple[str, int]:
    """The character class opened at ``seg[i - 1]`` as a regular expression, and the index
    after its ``]`` (read as git reads it: ``!`` or ``^`` negates, a leading ``]`` is a
    member, ``-`` between two characters is a range)."""
    j = i
    if j < len(seg) and seg[j] in "!^":
        j += 1
    if j < len(seg) and seg[j] == "]":
        j += 1
    while j < len(seg) and seg[j] != "]":
        j += 1
    if j >= len(seg):
        raise _Unclosed
    negate = seg[i] in "!^"
    body = seg[i + negate : j]
    out, k = [], 0
    while k < len(body):
        a = body[k]
        if k + 2 < len(body) and body[k + 1] == "-":
            b = body[k + 2]
            if a > b:
                raise PatternError(f"bad character range {a}-{b}")
            out.append(f"{_class_char(a)}-{_class_char(b)}")
            k += 3
        else:
            out.append(_class_char(a))
            k += 1
    return "[" + ("^" if negate else "") + "".join(out) + "]", j + 1


def check_brackets(pattern: str) -> None:
    """Raise :class:`PatternError` for a ``[...]`` of ``pattern`` with a range written
    backwards (for ``fnmatch`` patterns, which would match nothing there)."""
    for i, c in enumerate(pattern):
        if c == "[":
            try:
                _bracket(pattern, i + 1)
            except _Unclosed:
                pass


def _chunks(seg: str) -> list[list[str]]:
    """``seg`` split at its ``*`` runs: each chunk a list of one-character expressions."""
    chunks: list[list[str]] = [[]]
    i = 0
    while i < len(seg):
        c = seg[i]
        i += 1
        if c == "\\":
            if i >= len(seg):
                raise PatternError("trailing backslash")
            chunks[-1].append(re.escape(seg[i]))
            i += 1
        elif c == "*":
            if chunks[-1] or len(chunks) == 1:
                chunks.append([])
        elif c == "?":
            chunks[-1].append("[^/]")
        elif c == "[":
            expr, i = _bracket(seg, i)
            chunks[-1].append(expr)
        else:
            chunks[-1].append(re.escape(c))
    return chunks


class Glob:
    """One path component's glob (no ``/``): ``match(component)`` is truthy when it matches
    (a string comparison for a literal, one regular expression with at most one ``[^/]*``,
    else the chunks placed leftmost)."""

    __slots__ = ("match", "first", "middle", "last", "widths")

    def __init__(self, seg: str):
        chunks = _chunks(seg)
        if len(chunks) == 1 and all(len(x) == 1 or x[0] == "\\" for x in chunks[0]):
            self.match = "".join(x[-1] for x in chunks[0]).__eq__
        elif len(chunks) <= 2:  # one quantifier: no backtracking beyond O(n x glob)
            self.match = re.compile("[^/]*".join("".join(c) for c in chunks)).fullmatch
        else:
            compiled = [re.compile("".join(c)) for c in chunks]
            self.widths = [len(c) for c in chunks]
            self.first, self.middle, self.last = compiled[0], compiled[1:-1], compiled[-1]
            self.match = self._chunked

    def _chunked(self, s: str) -> bool:
        start, end = self.widths[0], len(s) - self.widths[-1]
        if end < start or not self.first.fullmatch(s, 0, start):
            return False
        if not self.last.fullmatch(s, end):
            return False
        for chunk in self.middle:  # leftmost placement: each chunk has a fixed width
            m = chunk.search(s, start, end)
            if m is None:
                return False
            start = m.end()
        return True


#: what a pattern says of a path: it does not match, it matches a folder above (or the path
#: as a folder, through a folder pattern), it matches the path itself
NO, FOLDER, ITSELF = 0, 1, 2


class Pattern:
    """One pattern: ``segs`` are :class:`Glob` and :data:`GLOBSTAR`; ``shape`` names the
    common forms matched without the general walk (most lines of a ``.gitignore``)."""

    __slots__ = ("text", "negate", "folder_only", "segs", "shape", "_closure")

    def __init__(self, text: str, negate: bool, folder_only: bool, segs: list, shape: str):
        self.text = text
        self.negate = negate
        self.folder_only = folder_only
        self.segs = segs
        self.shape = shape
        # the states each state reaches through ``**`` without reading a component
        self._closure = []
        for i in range(len(segs) + 1):
            reach, j = [i], i
            while j < len(segs) and segs[j] is GLOBSTAR:
                j += 1
                reach.append(j)
            self._closure.append(reach)

    def above(self, folders: list[str]) -> bool:
        """For a pattern of one glob at any depth: whether it matches one of ``folders``."""
        return any(self.segs[1].match(p) for p in folders)

    def match(self, parts: list[str], is_dir: bool, above: bool | None = None) -> int:
        """How this pattern matches ``parts`` (a folder when ``is_dir``): NO, FOLDER, ITSELF.
        ``above``: :meth:`above` of ``parts[:-1]``, when the caller has it."""
        shape = self.shape
        if shape == "all":
            return ITSELF
        if shape == "nested":  # any path with a "/" in it
            return self._verdict(len(parts) > 1 or is_dir)
        if shape in ("name", "name/**"):
            return self._match_name(parts, is_dir, above)
        if shape in ("fixed", "fixed/**"):
            return self._match_fixed(parts, is_dir)
        return self._match_globs(parts, is_dir)

    def _verdict(self, hit: bool) -> int:
        return NO if not hit else FOLDER if self.folder_only else ITSELF

    def _match_name(self, parts: list[str], is_dir: bool, above: bool | None) -> int:
        """ "name": one glob at any depth, the commonest pattern; "name/": a folder at any
        depth."""
        here = self.segs[1].match(parts[-1])
        if self.shape == "name" and here:
            return FOLDER if is_dir else ITSELF
        if above is None:
            above = self.above(parts[:-1])
        if self.shape == "name":
            return FOLDER if above else NO
        return self._verdict(above or (is_dir and here))

    def _match_fixed(self, parts: list[str], is_dir: bool) -> int:
        """ "a/b", "a/b/": no "**" before the end."""
        n, segs = len(parts), self.segs
        m = len(segs) - (self.shape == "fixed/**")
        if n < m or not all(segs[i].match(parts[i]) for i in range(m)):
            return NO
        if self.shape == "fixed":
            return ITSELF if n == m and not is_dir else FOLDER
        return self._verdict(m < n or is_dir)

    def _match_globs(self, parts: list[str], is_dir: bool) -> int:
        """A pattern with "**" inside; "a/**/b/**": everything below a match."""
        n, segs = len(parts), self.segs
        if segs[-1] is GLOBSTAR:
            ok = self._ends(len(segs) - 1, parts)
            return self._verdict(any(ok[:n]) or (ok[n] and is_dir))
        ok = self._ends(len(segs), parts)
        if ok[n] and not is_dir:
            return ITSELF
        return FOLDER if ok[n] or any(ok[:n]) else NO

    def _ends(self, end: int, parts: list[str]) -> list[bool]:
        """``ok[k]``: ``segs[:end]`` match ``parts[:k]`` exactly: a set of states, one step
        per component (no backtracking)."""
        segs, closure = self.segs, self._closure
        states = set(closure[0])
        ok = [end in states]
        for part in parts:
            nxt: set[int] = set()
            for s in states:
                if s < end:
                    seg = segs[s]
                    if seg is GLOBSTAR:
                        nxt.add(s)
                    elif seg.match(part):
                        nxt.update(closure[s + 1])
            states = nxt
            ok.append(end in states)
        return ok


def _shape(segs: list[str], folder_only: bool) -> str:
    shape = [s if s in (GLOBSTAR, "*") else "glob" for s in segs]
    if shape == [GLOBSTAR]:
        return "nested" if folder_only else "all"
    if shape == [GLOBSTAR, "*"]:
        return "all"
    if shape == [GLOBSTAR, "*", GLOBSTAR]:
        return "nested"
    if GLOBSTAR not in shape:
        return "fixed"
    if GLOBSTAR not in shape[:-1]:
        return "fixed/**"
    if shape == [GLOBSTAR, "glob"] or shape == [GLOBSTAR, "*"]:
        return "name"
    if shape[0] == shape[-1] == GLOBSTAR and len(shape) == 3:
        return "name/**"
    return ""


def compile_pattern(line: str) -> Pattern | None:
    """One line of a ``.gitignore`` (or one ``exclude`` entry); None for a blank line, a
    comment or a pattern git discards. Raises :class:`PatternError`."""
    text = line if line.endswith("\\ ") else line.rstrip()
    if not text or text.startswith("#") or text == "/":
        return None
    negate = text.startswith("!")
    body = text[1:] if negate else text
    segs: list = body.split("/")
    folder_only = not segs[-1]
    if not segs[0]:
        del segs[0]
    elif (len(segs) == 1 or (len(segs) == 2 and not segs[1])) and segs[0] != GLOBSTAR:
        segs.insert(0, GLOBSTAR)
    if not segs:
        raise PatternError("empty pattern")
    if not segs[-1]:
        segs[-1] = GLOBSTAR
    segs = [s for i, s in enumerate(segs) if not (s == GLOBSTAR and i and segs[i - 1] == GLOBSTAR)]
    try:
        compiled = [GLOBSTAR if s == GLOBSTAR else Glob(s) for s in segs]
    except _Unclosed:
        return None
    return Pattern(text, negate, folder_only, compiled, _shape(segs, folder_only))


class Spec:
    """The patterns of one ``.gitignore`` (or ``exclude``), in order."""

    def __init__(self, patterns: Iterable[Pattern]):
        self.patterns = list(patterns)[::-1]  # the last one that matches wins
        # the folder of the last path matched, and ``above`` of each pattern there: a walk
        # asks of every file of a folder in turn
        self._folder: str | None = None
        self._above: list[bool | None] = []

    def match_file(self, rel: str) -> bool:
        """Whether ``rel`` (a relative posix path; a trailing ``/`` for a folder) is
        matched: ignored, or excluded."""
        if not self.patterns:
            return False
        is_dir = rel.endswith("/")
        parts = rel.rstrip("/").split("/")
        folder = rel[: len(rel) - len(parts[-1]) - is_dir]
        if folder != self._folder:
            self._folder = folder
            self._above = [
                p.above(parts[:-1]) if p.shape in ("name", "name/**") else None
                for p in self.patterns
            ]
        best, ignored = NO, False
        for p, above in zip(self.patterns, self._above):
            how = p.match(parts, is_dir, above)
            if how > best:
                best, ignored = how, not p.negate
                if how == ITSELF:
                    break
        return ignored


def spec(lines: Iterable[str]) -> Spec:
    """A :class:`Spec` of ``lines``; raises :class:`PatternError` naming the bad line."""
    out = []
    for line in lines:
        try:
            p = compile_pattern(line)
        except PatternError as exc:
            raise PatternError(f"{line!r}: {exc}") from None
        if p is not None:
            out.append(p)
    return Spec(out)
