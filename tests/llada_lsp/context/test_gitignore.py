"""gitignore matching (llada_lsp.context.gitignore, exclusions) against real git: a corpus of
patterns in nested `.gitignore` files, `.git/info/exclude` and a global excludes file named by
`core.excludesFile`, and a tree of files; `git check-ignore --stdin` (in a temporary repository,
with a clean configuration) gives the expected answer for every path, and ours must agree."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llada_lsp.context.exclusions import Exclusions, global_excludes_file
from llada_lsp.context.gitignore import compile_rule, match, segment

ROOT_IGNORE = r"""
# comment
\#hash.txt
\!bang.txt
*.log
!keep.log
build/
/anchored.txt
docs/*.tmp
**/deep_dir
a/**/z.txt
logs/**
trail.txt\{SP}
spaces.txt{SP}{SP}{SP}
*.py[cod]
file[!0-9].dat
n?.cfg
[[:digit:]]*.num
[]x].br
[z-a].bad
data/
!data/keep.me
unclosed[ab
foo**bar
**/mid/**/end.c
x\*y
node_modules
""".replace("{SP}", " ")  # trailing spaces: one escaped, three dropped
SUB_IGNORE = """
!*.log
local.txt
/only_here.md
*.tmp
"""
INFO_EXCLUDE = "info_excluded.txt\n!local.txt\n"
GLOBAL_IGNORE = "*.swp\nglobal_dir/\n"

FILES = [
    "#hash.txt", "!bang.txt", "a.log", "keep.log", "sub/a.log", "sub/local.txt", "local.txt",
    "build/out.o", "sub/build/x.o", "build.txt", "anchored.txt", "sub/anchored.txt", "docs/x.tmp",
    "docs/sub/x.tmp", "x/y/deep_dir/f.c", "deep_dir/g.c", "a/z.txt", "a/b/c/z.txt", "b/a/z.txt",
    "logs/one/two.txt", "logs.txt", "trail.txt ", "trail.txt", "spaces.txt", "m.pyc", "m.pyo", "m.py",
    "filea.dat", "file1.dat", "n1.cfg", "n12.cfg", "7x.num", "x7.num", "].br", "x.br", "y.br", "z.bad",
    "data/a.txt", "data/keep.me", "unclosed[ab", "unclosedb", "foobar", "fooXbar", "foo/bar",
    "mid/end.c", "q/mid/r/s/end.c", "mid/end.h", "x*y", "xzy", "node_modules/p/i.js",
    "sub/node_modules/j.js", "sub/only_here.md", "only_here.md", "sub/z.tmp", "info_excluded.txt",
    "sub/info_excluded.txt", "e.swp", "global_dir/f", "sub/global_dir/f", "src/app.py", "src/util/helpers.ts",
]


def _git(*args: str, cwd: Path, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=env, input=stdin, text=True, capture_output=True)


@pytest.fixture()
def repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    if shutil.which("git") is None:
        pytest.fail("git is needed to compute the expected answers")
    home = tmp_path / "home"
    home.mkdir()
    (home / "my-ignore").write_text(GLOBAL_IGNORE)
    (home / ".gitconfig").write_text('[user]\n\tname = t\n[core]\n\texcludesFile = "~/my-ignore" ; the global one\n')
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
    ws = tmp_path / "ws"
    ws.mkdir()
    assert _git("init", "-q", cwd=ws, env=env).returncode == 0
    (ws / ".gitignore").write_text(ROOT_IGNORE)
    (ws / "sub").mkdir()
    (ws / "sub" / ".gitignore").write_text(SUB_IGNORE)
    (ws / ".git" / "info").mkdir(exist_ok=True)
    (ws / ".git" / "info" / "exclude").write_text(INFO_EXCLUDE)
    for f in FILES:
        p = ws / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x\n")
    return ws, env


def test_matches_git_check_ignore(repo: tuple[Path, dict[str, str]]) -> None:
    ws, env = repo
    out = _git("check-ignore", "--stdin", cwd=ws, env=env, stdin="\n".join(FILES) + "\n")
    assert out.returncode in (0, 1), out.stderr
    expected = set(out.stdout.split("\n")) - {""}
    assert {"a.log", "build/out.o", "e.swp", "info_excluded.txt"} <= expected  # the corpus is live
    assert global_excludes_file(env) == Path(env["HOME"]) / "my-ignore"
    ex = Exclusions(env=env)
    ex.set_roots([ws], [ws.resolve()])
    ours = {f for f in FILES if ex.ignored(str(ws / f))}
    assert ours == expected, (sorted(ours - expected), sorted(expected - ours))


def test_walk_time_check_agrees_with_the_whole_path_check(repo: tuple[Path, dict[str, str]]) -> None:
    """`entry_excluded` (a walk that never enters an excluded folder) and `ignored` agree."""
    ws, env = repo
    ex = Exclusions(env=env)
    ex.set_roots([ws], [ws.resolve()])
    for f in FILES:
        parts = f.split("/")
        walked = any(ex.entry_excluded(str(ws.joinpath(*parts[:k])), k < len(parts)) for k in range(1, len(parts) + 1))
        assert walked == (ex.ignored(str(ws / f)) or ex.secret(str(ws / f))), f


def test_the_defaults_cannot_be_shrunk_and_the_user_adds() -> None:
    ex = Exclusions(["*.sqlite", "!.env", "private/"], env={})
    for secret in ["/w/.env", "/w/.env.production", "/w/conf/prod.env", "/w/id_rsa", "/w/id_ed25519.pub",
                   "/w/tls/server.key", "/w/cert.pem", "/w/a.p12", "/w/.npmrc", "/w/.pypirc", "/home/u/.netrc",
                   "/home/u/.aws/credentials", "/home/u/.kube/config", "/w/kubeconfig", "/w/app.keystore",
                   "/w/.git-credentials", "/w/secrets.yaml", "/w/.docker/config.json", "/w/db.sqlite",
                   "/w/private/notes.py"]:
        assert ex.secret(secret), secret
    for code in ["/w/app.py", "/w/secrets.py", "/w/src/credentials_store.ts", "/w/keys.py", "/w/README.md"]:
        assert not ex.secret(code), code



def test_a_paths_secret_decision_is_kept_until_the_rules_or_folders_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every completion asks whether its document is secret (twice): the patterns are matched
    once a path, again after `set_user_globs` or `set_roots`, and the answer follows the rules."""
    import llada_lsp.context.exclusions as exclusions

    calls = []
    real_match = exclusions.match

    def counting(*a: object, **k: object) -> object:
        calls.append(1)
        return real_match(*a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(exclusions, "match", counting)
    ex = Exclusions(env={})
    path = str(tmp_path / "private" / "notes.py")
    assert ex.secret(path) is False and calls
    n = len(calls)
    assert ex.secret(path) is False and len(calls) == n  # kept: no pattern matched again
    ex.set_user_globs(["private/"])
    assert ex.secret(path) is True and len(calls) > n  # new rules: decided again
    n = len(calls)
    ex.set_roots([tmp_path / "private"], [tmp_path / "private"])  # now relative to that folder
    assert ex.secret(path) is False and len(calls) > n

def test_hostile_patterns_stay_fast() -> None:
    """A `.gitignore` is the repository's: a pattern built to backtrack (`*a*a*a...b`) on a
    long name is answered in linear passes (the greedy walk), not polynomial time."""
    rule = compile_rule("*a" * 30 + "*b")
    assert rule is not None
    assert match((rule,), "a" * 250, False) is None
    deep = compile_rule("**/" * 20 + "x/**/y")
    assert deep is not None and match((deep,), "/".join(["n"] * 1500), False) is None
    assert segment("[[:bogus:]]")("a") is False  # an unknown class matches nothing


def test_a_folder_opened_inside_an_ignored_one_and_linked_ignore_files(tmp_path: Path) -> None:
    """A workspace folder the outer repository ignores (`build/`) was opened on purpose: its
    files count (the folders above it are not asked about); a `.gitignore` that is a link is
    not followed (as git); `.git/info/exclude` of the repository above the folder counts."""
    (tmp_path / ".git" / "info").mkdir(parents=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("*.tmp\n")
    (tmp_path / ".gitignore").write_text("build/\n")
    folder = tmp_path / "build" / "sub"
    folder.mkdir(parents=True)
    (tmp_path / "elsewhere.txt").write_text("*.py\n")
    (folder / ".gitignore").symlink_to(tmp_path / "elsewhere.txt")
    ex = Exclusions(env={})
    ex.set_roots([folder], [folder.resolve()])
    assert not ex.ignored(str(folder / "a.py")) and ex.ignored(str(folder / "x.tmp"))
    assert ex.usable(str(folder / "a.py")) and not ex.usable(str(tmp_path / "other" / "a.py"))


def test_the_excludes_file_set_in_an_included_config_is_followed(tmp_path: Path) -> None:
    """`core.excludesFile` set in a file that `~/.gitconfig` includes (a path relative to the
    including file, and one with `~/`, nested) counts, as git's own `check-ignore` says; an
    include that leaves the home is not followed (SECURITY.md)."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to compute the expected answers")
    home, ws = tmp_path / "home", tmp_path / "ws"
    (home / ".config" / "git").mkdir(parents=True)
    ws.mkdir()
    (home / "inc-ignore").write_text("*.inc_secret\n")
    (home / ".gitconfig").write_text("[user]\n\tname = t\n[include]\n\tpath = .config/git/first.inc\n")
    (home / ".config" / "git" / "first.inc").write_text("[include]\n\tpath = ~/second.inc\n")
    (home / "second.inc").write_text("[core]\n\texcludesFile = ~/inc-ignore\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
    assert _git("init", "-q", cwd=ws, env=env).returncode == 0
    files = ["a.inc_secret", "b.txt"]
    for f in files:
        (ws / f).write_text("x\n")
    out = _git("check-ignore", "--stdin", cwd=ws, env=env, stdin="\n".join(files) + "\n")
    assert set(out.stdout.split()) == {"a.inc_secret"}, out.stderr  # git follows both includes
    assert global_excludes_file(env) == home / "inc-ignore"
    ex = Exclusions(env=env)
    ex.set_roots([ws], [ws.resolve()])
    assert [f for f in files if ex.ignored(str(ws / f))] == ["a.inc_secret"]

    outside = tmp_path / "outside.inc"  # outside the home: git follows it, the server does not
    outside.write_text("[core]\n\texcludesFile = ~/inc-ignore\n")
    (home / "second.inc").write_text(f"[include]\n\tpath = {outside}\n")
    assert global_excludes_file(env) == home / ".config" / "git" / "ignore"  # the default, not the outside one
    (home / "second.inc").write_text("[include]\n\tpath = ../outside.inc\n")  # relative, leaving the home
    assert global_excludes_file(env) == home / ".config" / "git" / "ignore"


INCLUDE_IFS = {  # condition -> the name of the excludes file (and of the extension it ignores) it picks
    "gitdir:~/work/": "work",  # `~/`, a trailing `/`: everything below
    "gitdir/i:~/CASE/": "case",  # case-insensitive
    "gitdir:*/plain/.git": "plain",  # relative: `**/` before it
    "gitdir:./rel/": "rel",  # `./`: the including config's folder
    "gitdir:~/wor": "never1",  # no `/` at the end: the git folder itself must match
    "onbranch:feature/": "branch",  # the branch checked out
    "gitdir:~/home-link/": "never2",  # a link to a folder: git matches the resolved git folder
    "gitdir:~/elsewhere/": "linked",  # (the folder opened through the link)
}


def test_the_excludes_file_set_under_an_include_if_follows_the_repository(tmp_path: Path) -> None:
    """`[includeIf "gitdir:..."]`, `gitdir/i:` and `onbranch:` in ~/.gitconfig pick a different
    `core.excludesFile` per repository: for each repository, the files ignored are the ones
    real `git check-ignore` says (HOME in a temporary folder, no system config)."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to compute the expected answers")
    home = tmp_path / "home"
    home.mkdir()
    lines = ["[user]", "\tname = t", "[core]", "\texcludesFile = ~/ignore-base"]
    for cond, name in INCLUDE_IFS.items():
        (home / f"{name}.inc").write_text(f"[core]\n\texcludesFile = ~/ignore-{name}\n")
        lines += [f'[includeIf "{cond}"]', f"\tpath = {name}.inc"]
    (home / ".gitconfig").write_text("\n".join(lines) + "\n")
    names = ["base", *INCLUDE_IFS.values()]
    for name in names:
        (home / f"ignore-{name}").write_text(f"*.{name}\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "LC_ALL": "C"}
    (home / "elsewhere").mkdir()
    (home / "home-link").symlink_to(home / "elsewhere")
    repos = {"work/a": "", "case/b": "", "x/plain": "", "rel/r": "", "other/o": "", "other/f": "feature/x",
             "other/g": "main", "home-link/linked": "", "work": ""}
    files = [f"f.{name}" for name in names]
    picked = set()
    for rel, branch in repos.items():
        ws = home / rel
        ws.mkdir(parents=True, exist_ok=True)
        assert _git("init", "-q", cwd=ws, env=env).returncode == 0
        if branch:
            assert _git("symbolic-ref", "HEAD", f"refs/heads/{branch}", cwd=ws, env=env).returncode == 0
        for f in files:
            (ws / f).write_text("x\n")
        out = _git("check-ignore", "--stdin", cwd=ws, env=env, stdin="\n".join(files) + "\n")
        expected = sorted(out.stdout.split())
        assert len(expected) == 1, (rel, expected, out.stderr)  # one excludes file: the last that applies
        ex = Exclusions(env=env)
        ex.set_roots([ws], [ws.resolve()])
        assert sorted(f for f in files if ex.ignored(str(ws / f))) == expected, rel
        picked.add(expected[0].removeprefix("f."))
    assert picked == {"base", "work", "case", "plain", "rel", "branch", "linked"}  # git's answers cover each
