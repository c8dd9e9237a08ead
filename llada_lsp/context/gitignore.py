"""gitignore matching, written here (no `git` child process: a repository's own `.git/config`
could make git run its hooks or fsmonitor; no extra dependency).

Semantics follow gitignore(5) and git's wildmatch, checked against `git check-ignore` on a
corpus (tests/llada_lsp/context/test_gitignore.py):

- a line is a pattern; blank lines and `#` comments are skipped; trailing spaces are dropped
  unless escaped (`\\ `); `\\#`, `\\!` and any `\\x` stand for the character itself;
- `!` re-includes what an earlier pattern excluded; a path inside an excluded folder stays
  excluded (git does not look inside it);
- a trailing `/` matches folders only; a pattern with no other `/` matches a name at any level
  below its `.gitignore`, one with a `/` (a leading one included) matches the path relative
  to the `.gitignore`'s folder;
- `*` and `?` never match `/`; `[...]` classes with `!`/`^` negation, ranges and `[:alpha:]`
  names (never matching `/`; an unclosed `[` or an unknown name matches nothing); `**/` is
  any number of folders, `/**` everything inside, `**` elsewhere is `*`;
- precedence: within one file the last matching pattern wins; a deeper `.gitignore` beats a
  shallower one, which beats `.git/info/exclude`, which beats the global excludes file.
"""

from __future__ import annotations

import os
import re
import stat
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MAX_IGNORE_BYTES = 1 << 20  # a larger ignore file is not read
FRESH_S = 2.0  # a .gitignore is looked at again after this long
_CLASSES = {
    "alnum": string.ascii_letters + string.digits, "alpha": string.ascii_letters, "blank": " \t",
    "cntrl": "".join(map(chr, range(32))) + "\x7f", "digit": string.digits,
    "graph": "".join(map(chr, range(33, 127))), "lower": string.ascii_lowercase,
    "print": "".join(map(chr, range(32, 127))), "punct": string.punctuation,
    "space": " \t\n\r\x0b\x0c", "upper": string.ascii_uppercase, "xdigit": string.hexdigits,
}


Segment = Callable[[str], bool]  # whether one name (no `/`) matches a pattern's segment


def _any(name: str) -> bool:
    return True


def _never(name: str) -> bool:
    return False


@dataclass(frozen=True)
class Rule:
    """One pattern line: its segments (split at `/`) and flags."""

    segs: tuple[Segment | None, ...]  # None: `**`, any number of names
    negated: bool
    dir_only: bool
    basename: bool  # no `/` in the pattern: matches the last name of the path


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The rules of an ignore file's text, in order."""
    return tuple(r for line in text.split("\n") if (r := compile_rule(line)) is not None)


def compile_rule(line: str) -> Rule | None:
    """One line as a rule; None for a blank line or a comment."""
    if line.startswith("#"):
        return None
    line = _trim_trailing_spaces(line)
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    dir_only = line.endswith("/") and not line.endswith("\\/")
    if dir_only:
        line = line[:-1]
    if not line:
        return None
    line = line.replace("\\/", "/")
    basename = "/" not in line
    if line.startswith("/"):
        line = line[1:]
    parts = line.split("/")
    segs: list[Segment | None] = [None if _is_starstar(p) else segment(p) for p in parts]
    if len(segs) > 1 and segs[-1] is None:
        segs[-1:] = [_any, None]  # a trailing `/**`: something inside, not the folder itself
    return Rule(tuple(segs), negated, dir_only, basename)


def _is_starstar(part: str) -> bool:
    return len(part) >= 2 and part == "*" * len(part)


def _trim_trailing_spaces(line: str) -> str:
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        backslashes = len(line[:end - 1]) - len(line[:end - 1].rstrip("\\"))
        if backslashes % 2:  # an escaped space ends the pattern
            break
        end -= 1
    return line[:end]


def segment(pat: str) -> Segment:
    """A matcher of one name for one segment of a pattern (`*`, `?`, classes, escapes).
    With at most one `*` a regex; with more the greedy two-pointer walk (linear in
    practice, never the regex's polynomial backtracking on a hostile pattern)."""
    tokens: list[str | None] = []  # None: `*`; else a one-character regex
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            while i < n and pat[i] == "*":
                i += 1
            tokens.append(None)
            continue
        if c == "?":
            tokens.append(".")
            i += 1
        elif c == "[":
            cls, i = _char_class(pat, i)
            if cls is None:
                return _never
            tokens.append(cls)
        elif c == "\\":
            if i + 1 >= n:
                return _never  # a trailing backslash matches nothing
            tokens.append(re.escape(pat[i + 1]))
            i += 2
        else:
            tokens.append(re.escape(c))
            i += 1
    if tokens.count(None) <= 1:
        rx = re.compile("".join(".*" if t is None else t for t in tokens) + r"\Z", re.DOTALL)
        return lambda name: rx.match(name) is not None
    compiled = [None if t is None else re.compile(t, re.DOTALL) for t in tokens]
    return lambda name: _greedy(compiled, name)


def _greedy(tokens: list[re.Pattern[str] | None], s: str) -> bool:
    p = t = 0
    star, mark = -1, 0
    while t < len(s):
        if p < len(tokens) and tokens[p] is None:
            star, mark = p, t
            p += 1
            continue
        tok = tokens[p] if p < len(tokens) else None
        if tok is not None and tok.match(s[t]):
            p += 1
            t += 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    return all(tok is None for tok in tokens[p:])


def _set_char(ch: str) -> str:
    return ch if ch.isalnum() and ch.isascii() else "\\" + ch if ch.isascii() else ch


def _char_class(pat: str, i: int) -> tuple[str | None, int]:
    """The class starting at pat[i] == '[' as a one-character regex (None: it matches nothing:
    unclosed, or an unknown `[:name:]`), and the index after its `]`."""
    n = len(pat)
    i += 1
    negated = i < n and pat[i] in "!^"
    if negated:
        i += 1
    items: list[str] = []
    prev: str | None = None
    first = True
    while True:
        if i >= n:
            return None, n
        c = pat[i]
        if c == "]" and not first:
            break
        first = False
        if c == "\\":
            i += 1
            if i >= n:
                return None, n
            c = pat[i]
            items.append(_set_char(c))
            prev = c
        elif c == "-" and prev is not None and i + 1 < n and pat[i + 1] != "]":
            i += 1
            hi = pat[i]
            if hi == "\\":
                i += 1
                if i >= n:
                    return None, n
                hi = pat[i]
            if prev <= hi:  # the start was matched alone already (a reversed range: only it)
                items.append(f"{_set_char(prev)}-{_set_char(hi)}")
            prev = None
            i += 1
            continue
        elif c == "[" and i + 1 < n and pat[i + 1] == ":":
            end = pat.find(":]", i + 2)
            name = pat[i + 2:end] if end >= 0 else ""
            if name not in _CLASSES:
                return None, n
            items.extend(_set_char(ch) for ch in _CLASSES[name])
            prev = None
            i = end + 2
            continue
        else:
            items.append(_set_char(c))
            prev = c
        i += 1
    body = "".join(items)
    if negated:
        return f"[^/{body}]", i + 1
    return (f"[{body}]" if body else None), i + 1


def match_parts(segs: tuple[Segment | None, ...], parts: list[str]) -> bool:
    """Whether the names `parts` match the segments, `**` (None) taking any number of names.
    The segments before the first `**` and after the last are checked at the ends first (a
    `**/name` costs one check at any depth); the rest is the greedy walk again, one level up
    (every `**` is alike)."""
    if None not in segs:
        return len(segs) == len(parts) and all(_fits(seg, part) for seg, part in zip(segs, parts, strict=True))
    first = segs.index(None)
    last = len(segs) - 1 - segs[::-1].index(None)
    tail = len(segs) - 1 - last
    if len(parts) < first + tail or not all(_fits(seg, part) for seg, part in zip(segs[:first], parts, strict=False)):
        return False
    if tail and not all(_fits(seg, part) for seg, part in zip(segs[last + 1:], parts[len(parts) - tail:], strict=True)):
        return False
    mid = segs[first:last + 1]
    return all(seg is None for seg in mid) or _greedy_parts(mid, parts[first:len(parts) - tail])


def _fits(seg: Segment | None, part: str) -> bool:
    return seg is not None and seg(part)


def _greedy_parts(segs: tuple[Segment | None, ...], parts: list[str]) -> bool:
    p = t = 0
    star, mark = -1, 0
    while t < len(parts):
        seg = segs[p] if p < len(segs) else _never
        if seg is None:
            star, mark = p, t
            p += 1
        elif seg(parts[t]):
            p += 1
            t += 1
        elif star >= 0:
            mark += 1
            p, t = star + 1, mark
        else:
            return False
    return all(seg is None for seg in segs[p:])


def match(rules: tuple[Rule, ...], rel: str, is_dir: bool) -> bool | None:
    """The last rule matching `rel` (a path relative to the rules' folder): True (ignored),
    False (re-included by `!`), None (no rule matches)."""
    parts = rel.split("/")
    for r in reversed(rules):
        if r.dir_only and not is_dir:
            continue
        if match_parts(r.segs, parts[-1:] if r.basename else parts):
            return not r.negated
    return None


def read_small(path: Path, follow: bool = True) -> str:
    """An ignore or config file's text; "" when it is missing, not a regular file, larger than
    MAX_IGNORE_BYTES or unreadable (never blocks: O_NONBLOCK, the type checked on the
    descriptor). `follow`: whether a link at `path` itself is followed."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_IGNORE_BYTES:
            return ""
        data = os.read(fd, MAX_IGNORE_BYTES + 1)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data[:MAX_IGNORE_BYTES].decode("utf-8", "replace")


Chain = tuple[tuple[str, tuple[Rule, ...]], ...]  # (folder relative to the top, its rules), top first


@dataclass
class GitIgnore:
    """The ignore rules of one repository: the `.gitignore` files under its `top` folder (read
    when first asked for, and again after FRESH_S), and `base` rules of lower precedence
    (`.git/info/exclude`, then the global excludes file), highest first. A `.gitignore` that
    is a link is not followed (as git does)."""

    top: Path
    base: list[tuple[Rule, ...]] = field(default_factory=list)
    chains: dict[str, Chain] = field(default_factory=dict)  # folder -> the rules above its entries
    since: float = field(default_factory=time.monotonic)

    def rules_in(self, folder: str) -> tuple[Rule, ...]:
        """The rules of `folder`'s `.gitignore` (`folder` relative to `top`, "" for the top)."""
        path = self.top / folder / ".gitignore" if folder else self.top / ".gitignore"
        return parse_rules(read_small(path, follow=False))  # a link is not followed (as git)

    def chain(self, folder: str) -> Chain:
        """The `.gitignore` rules that apply to the entries of `folder`, top first (each folder
        looked at once per FRESH_S: a walk costs one look per folder, whatever its depth)."""
        if time.monotonic() - self.since > FRESH_S:
            self.chains.clear()
            self.since = time.monotonic()
        got = self.chains.get(folder)
        if got is not None:
            return got
        todo = [folder]
        while todo[-1] and todo[-1].rpartition("/")[0] not in self.chains:  # up to a known folder
            todo.append(todo[-1].rpartition("/")[0])
        above: Chain = self.chains.get(todo[-1].rpartition("/")[0], ()) if todo[-1] else ()
        for f in reversed(todo):
            rules = self.rules_in(f)
            above = (*above, (f, rules)) if rules else above
            self.chains[f] = above
        return above

    def decide(self, rel: str, is_dir: bool) -> bool:
        """Whether the last name of `rel` (relative to `top`, `/`-separated) is ignored by the
        rules alone, its parent folders taken as not ignored."""
        for folder, rules in reversed(self.chain(rel.rpartition("/")[0])):  # the deepest first
            got = match(rules, rel[len(folder) + 1:] if folder else rel, is_dir)
            if got is not None:
                return got
        for rules in self.base:
            got = match(rules, rel, is_dir)
            if got is not None:
                return got
        return False

    def ignored(self, rel: str, is_dir: bool, below: int = 0) -> bool:
        """Whether `rel` is ignored: it, or a folder above it, is (git never looks inside an
        ignored folder, so a `!` cannot bring a file in it back). The first `below` folders
        (the workspace folder's own path inside the repository, opened on purpose) are not
        asked about."""
        parts = [p for p in rel.split("/") if p]
        for k in range(below + 1, len(parts) + 1):
            if self.decide("/".join(parts[:k]), is_dir if k == len(parts) else True):
                return True
        return False


def own_git_dir(top: Path) -> Path | None:
    """The git folder of the repository (or worktree) at `top` as git names it for
    `[includeIf "gitdir:..."]`: `top/.git`, or the folder a `.git` file names (a worktree's
    own, not its `commondir`); None when `top` holds no repository."""
    dot = top / ".git"
    if dot.is_dir():
        return dot
    text = read_small(dot)
    if not text.startswith("gitdir:"):
        return None
    gd = Path(text[len("gitdir:"):].strip())
    return gd if gd.is_absolute() else top / gd


def git_dir(top: Path) -> Path | None:
    """The repository's git folder: `top/.git`, or the folder a `.git` file names (a worktree
    or submodule: its `commondir`, where `info/exclude` lives)."""
    gd = own_git_dir(top)
    if gd is None or gd == top / ".git":
        return gd
    common = read_small(gd / "commondir").strip()
    if common:
        return Path(os.path.normpath(gd / common)) if not Path(common).is_absolute() else Path(common)
    return gd


def find_top(folder: Path) -> Path:
    """The repository holding `folder`: the nearest folder at or above it with a `.git`; the
    folder itself when there is none (its `.gitignore` files still count)."""
    for d in (folder, *folder.parents):
        if os.path.lexists(d / ".git"):
            return d
    return folder
