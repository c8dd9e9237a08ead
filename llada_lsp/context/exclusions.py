"""What never reaches a prompt as context, decided in one place (SECURITY.md "Secrets").

- `DEFAULT_EXCLUDES`: names of secrets (keys, tokens, credentials, `.env` files), gitignore
  patterns; a workspace cannot shrink the list. With the `exclude` option (the user's own
  patterns, to which a workspace may only add) they make a file *secret*: it is never read
  for context, and a completion in it gets no answer (as Copilot does for `.env`).
- gitignore (`llada_lsp.context.gitignore`): each workspace folder's repository's `.gitignore`
  files, its `.git/info/exclude` and the user's global excludes file (`core.excludesFile` of
  the user's git config and the files its `[include]`s, and its `[includeIf]`s that hold for
  the folder's repository (`gitdir:`, `gitdir/i:`, `onbranch:`), name inside the home or
  config folder, else `$XDG_CONFIG_HOME/git/ignore` or `~/.config/git/ignore`): an ignored file is
  not indexed and an open one is not used as context.
- Open documents are context only inside a workspace folder (the path as named and as
  resolved), neither secret nor ignored, and of a language the current one can use
  (`compatible`, over `workspace_index.family`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from llada_lsp.context.gitignore import (
    GitIgnore,
    Rule,
    compile_rule,
    find_top,
    git_dir,
    match,
    match_parts,
    own_git_dir,
    parse_rules,
    read_small,
)

_DATA = ("json", "yaml", "yml", "toml", "ini", "env", "txt", "conf", "cfg", "properties", "xml", "csv")  # not code
# Names only (no `/` inside): each is matched against one name, so a check costs the same at
# any depth; a folder's name (`.ssh/`) excludes everything in it.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    # environment files
    ".env", ".env.*", "*.env", ".envrc", ".flaskenv",
    # private keys and key stores
    "*.pem", "*.key", "*.p12", "*.pfx", "*.p8", "*.ppk", "*.jks", "*.keystore", "*.truststore", "*.kdbx",
    "*.gpg", "*.pgp", "*.asc", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".ssh/", ".gnupg/",
    # package managers' and tools' tokens
    ".npmrc", ".yarnrc.yml", ".pypirc", ".netrc", "_netrc", ".git-credentials", ".gitcookies", ".htpasswd",
    ".pgpass", ".my.cnf", ".dockercfg", ".docker/", ".vault-token", ".s3cfg", ".boto",
    # cloud and cluster credentials
    "credentials", ".aws/", ".azure/", "gcloud/", "kubeconfig", "*.kubeconfig", ".kube/",
    "*.tfvars", "*.tfstate", "*.tfstate.*", "service-account*.json", "client_secret*.json",
    # data files named as secrets or credentials (a `secrets.py` module is code, and kept)
    *(f"{stem}.{ext}" for stem in ("secret", "secrets", "credentials") for ext in _DATA),
    "*.secret", "*.secrets", ".secrets", "*.keychain", "*.keychain-db",
)
# Languages whose files can define names for each other (else: a language only for itself).
FAMILIES = ({"javascript", "javascriptreact", "typescript", "typescriptreact"}, {"c", "cpp"})


def family(language_id: str) -> frozenset[str]:
    """The languages whose files can define names for a file of `language_id`."""
    for f in FAMILIES:
        if language_id in f:
            return frozenset(f)
    return frozenset({language_id})


def compatible(current: str, other: str) -> bool:
    """Whether a file of language `other` may be context for a file of `current`: the same
    language, or the same family (ts/tsx/js/jsx; c/cpp). Text, markdown and json only with
    their own language."""
    return other in family(current)


def global_excludes_file(env: Mapping[str, str], gitdir: Path | None = None) -> Path | None:
    """The user's global excludes file: `core.excludesFile` from the user's git config
    ($GIT_CONFIG_GLOBAL, else ~/.gitconfig after $XDG_CONFIG_HOME/git/config, each with the
    files its `[include]`s and its `[includeIf]`s that hold for the repository at `gitdir`
    name, `_excludes_setting`; the repository's own config is never read), else
    $XDG_CONFIG_HOME/git/ignore or ~/.config/git/ignore."""
    home = env.get("HOME", "")
    xdg = env.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else "")
    configs = [env["GIT_CONFIG_GLOBAL"]] if env.get("GIT_CONFIG_GLOBAL") else \
        [p for p in (os.path.join(xdg, "git", "config") if xdg else "",
                     os.path.join(home, ".gitconfig") if home else "") if p]
    # where an included file may lie: the user's home, config folder and the named config's own folder
    places = [os.path.realpath(d) for d in (home, xdg, *(os.path.dirname(c) for c in configs)) if d]
    found: str | None = None
    for cfg in configs:
        found = _excludes_setting(Path(cfg), Where(home, places, gitdir)) or found
    if found is not None:
        if found.startswith("~/") and home:
            found = os.path.join(home, found[2:])
        return Path(found) if os.path.isabs(found) else None
    return Path(xdg, "git", "ignore") if xdg else None


_SECTION = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
MAX_INCLUDE_DEPTH = 10  # git's own limit on nested includes
# paths whose `secret` decision is kept until the rules or the folders change: every completion
# asks it of its document twice, and the ~90 patterns over each folder of a path took ~2-5 ms
SECRET_MEMO = 4096


@dataclass(frozen=True)
class Where:
    """What the includes of the user's git config are read against: the home, the folders an
    included file may lie in (`places`), the repository's git folder (`[includeIf]`)."""

    home: str
    places: list[str]
    gitdir: Path | None = None


def _included(raw: str, config: Path, where: Where) -> Path | None:
    """The file an `[include] path` value names: `~/` is the home, a relative path is relative
    to the including file's folder (as git). None when it resolves outside `places` (the
    user's home and config folders): a config reaching elsewhere is not followed."""
    value = _config_value(raw)
    if not value:
        return None
    if value.startswith("~/"):
        if not where.home:
            return None
        value = os.path.join(where.home, value[2:])
    path = os.path.realpath(os.path.join(config.parent, value))
    if not any(path == d or path.startswith(d.rstrip("/") + "/") for d in where.places):
        return None
    return Path(path)


def _glob_holds(pattern: str, text: str, icase: bool) -> bool:
    """git's wildmatch with WM_PATHNAME (`*` within a name, `**` across): `pattern` against the
    whole of `text`, both `/`-separated."""
    if icase:
        pattern, text = pattern.lower(), text.lower()
    rule = compile_rule("/" + pattern.lstrip("/"))
    return rule is not None and match_parts(rule.segs, text.lstrip("/").split("/"))


def _condition_holds(cond: str, config: Path, where: Where) -> bool:
    """Whether an `[includeIf "cond"]` holds (git-config(1), "Conditional includes"):
    `gitdir:` / `gitdir/i:` (the repository's git folder, resolved, against the pattern: `~/` the home, `./` the config's folder, `**/` before any other relative one, `**`
    after a trailing `/`) and `onbranch:` (the branch checked out, from the git folder's
    `HEAD`); any other condition (`hasconfig:`) does not hold."""
    kind, _, pat = cond.partition(":")
    gd = where.gitdir
    if gd is None or not pat:
        return False
    if kind == "onbranch":
        head = read_small(gd / "HEAD").strip()
        if not head.startswith("ref: refs/heads/"):
            return False  # a detached HEAD is on no branch
        return _glob_holds(pat + "**" if pat.endswith("/") else pat, head[len("ref: refs/heads/"):], False)
    if kind not in ("gitdir", "gitdir/i"):
        return False
    prefix = ""
    if pat.startswith("~/"):
        if not where.home:
            return False
        pat = where.home.rstrip("/") + pat[1:]
    if pat.startswith("./"):
        prefix, pat = os.path.dirname(os.path.realpath(config)).rstrip("/") + "/", pat[2:]
    elif not pat.startswith("/"):
        pat = "**/" + pat
    if pat.endswith("/"):
        pat += "**"
    text = os.path.realpath(gd)  # git finds the repository from its resolved working directory
    if kind == "gitdir/i":
        prefix, text = prefix.lower(), text.lower()
    # the prefix (a `./` pattern's folder) is compared literally, as git does
    return text.startswith(prefix) and _glob_holds(pat, text[len(prefix):], kind == "gitdir/i")


def _excludes_setting(config: Path, where: Where, depth: int = 0) -> str | None:
    """The last `core.excludesFile` value of a git config file, the files its `[include] path`s
    and its holding `[includeIf "..."] path`s (`_condition_holds`) name read where the include
    stands (`_included`)."""
    section, value, holds = "", None, False
    for line in read_small(config).split("\n"):
        m = _SECTION.match(line)
        if m:
            section, line = m.group(1).lower(), m.group(3)
            sub = re.sub(r"\\(.)", r"\1", m.group(2) or "")
            holds = section == "include" or (section == "includeif" and _condition_holds(sub, config, where))
        key, eq, raw = line.partition("=")
        key = key.strip().lower()
        if section == "core" and eq and key == "excludesfile":
            value = _config_value(raw)
        elif holds and eq and key == "path" and depth < MAX_INCLUDE_DEPTH:
            inc = _included(raw, config, where)
            got = _excludes_setting(inc, where, depth + 1) if inc is not None else None
            value = got if got is not None else value
    return value


def _config_value(raw: str) -> str:
    out, quoted, i = [], False, 0
    raw = raw.strip()
    while i < len(raw):
        c = raw[i]
        if c == '"':
            quoted = not quoted
        elif c in "#;" and not quoted:
            break
        elif c == "\\" and i + 1 < len(raw):
            i += 1
            out.append({"n": "\n", "t": "\t"}.get(raw[i], raw[i]))
        else:
            out.append(c)
        i += 1
    return "".join(out).strip() if not quoted else "".join(out)


class Exclusions:
    """The exclusion rules of the workspace folders (`set_roots`) and the user's patterns."""

    def __init__(self, user_globs: Iterable[str] = (), env: Mapping[str, str] | None = None) -> None:
        self.env = env if env is not None else os.environ
        self.secret_rules: tuple[Rule, ...] = ()
        self.roots: list[Path] = []
        self.real_roots: list[Path] = []
        self.repos: dict[Path, GitIgnore] = {}  # workspace folder -> its repository's rules
        self._secret: dict[str, bool] = {}  # path -> `secret(path)` under the rules and folders now
        self.set_user_globs(user_globs)

    def set_user_globs(self, globs: Iterable[str]) -> None:
        """The defaults plus the user's patterns (gitignore syntax; a `!` cannot re-include)."""
        lines = [*DEFAULT_EXCLUDES, *(g for g in globs if not g.lstrip().startswith("!"))]
        self.secret_rules = tuple(r for g in lines if (r := compile_rule(g.strip())) is not None)
        self._secret = {}

    def set_roots(self, roots: list[Path], real_roots: list[Path]) -> None:
        self.roots, self.real_roots = list(roots), list(real_roots)
        self._secret = {}
        self.repos = {}
        for root in self.roots:
            top = find_top(root)
            gd = git_dir(top)
            info = parse_rules(read_small(gd / "info" / "exclude")) if gd is not None else ()
            excludes = global_excludes_file(self.env, own_git_dir(top))  # `[includeIf]`s: per repository
            global_rules = parse_rules(read_small(excludes)) if excludes is not None else ()
            self.repos[root] = GitIgnore(top, [info, global_rules])

    def _root_of(self, path: str) -> str | None:
        return next((r for r in map(str, self.roots) if path.startswith(r.rstrip("/") + "/")), None)

    @staticmethod
    def _rel(path: str, folder: str) -> str:
        return path[len(folder.rstrip("/")) + 1:]

    def secret(self, path: str) -> bool:
        """Whether `path` (a file) matches the default exclusions or the user's patterns, or
        lies in a folder that does; matched relative to its workspace folder, else whole. A
        path's answer is kept until `set_user_globs` or `set_roots` (the rules read no file)."""
        known = self._secret.get(path)
        if known is not None:
            return known
        if len(self._secret) >= SECRET_MEMO:
            self._secret.clear()
        out = self._secret[path] = self._match_secret(path)
        return out

    def _match_secret(self, path: str) -> bool:
        root = self._root_of(path)
        rel = self._rel(path, root) if root is not None else path.lstrip("/")
        parts = [p for p in rel.split("/") if p and p != "."]
        return any(match(self.secret_rules, "/".join(parts[:k]), k < len(parts)) is True
                   for k in range(1, len(parts) + 1))

    def ignored(self, path: str, is_dir: bool = False) -> bool:
        """Whether git ignores `path` in its workspace folder's repository."""
        root = self._root_of(path)
        repo = self.repos.get(Path(root)) if root is not None else None
        if repo is None or root is None:
            return False
        below = len(Path(root).relative_to(repo.top).parts)
        return repo.ignored(self._rel(path, str(repo.top)), is_dir, below)

    def entry_excluded(self, path: str, is_dir: bool) -> bool:
        """For a walk that never enters an excluded folder: whether this entry is secret or
        ignored, its parent folders taken as neither."""
        root = self._root_of(path)
        if root is None:
            return True
        if match(self.secret_rules, self._rel(path, root), is_dir) is True:
            return True
        repo = self.repos.get(Path(root))
        return repo is not None and repo.decide(self._rel(path, str(repo.top)), is_dir)

    def usable(self, path: str) -> bool:
        """Whether an open document at `path` (a file path; an untitled or other URI is not)
        may be context: inside a workspace folder as named and as resolved, neither secret nor
        ignored (under either name)."""
        if not os.path.isabs(path) or self._root_of(path) is None:
            return False
        real = os.path.realpath(path)
        if not any(Path(real).is_relative_to(r) for r in self.real_roots):
            return False
        if self.secret(path) or self.ignored(path):
            return False
        return real == path or self._root_of(real) is None or not (self.secret(real) or self.ignored(real))
