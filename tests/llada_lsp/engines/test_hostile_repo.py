"""A repository the user opens cannot run code as the server or the daemon (issue 49 §1).

The editors start `llada-lsp` in the workspace (vscode-languageclient: the first folder;
Neovim: its working directory). A repository holding packages named like ours (`engine/`,
`llada_lsp/`) or like our dependencies (`torch/`, `websockets/`) writes a canary when
imported. With `engine = "auto"` the real server starts a real daemon from inside it: no
canary, the daemon comes up and a completion arrives."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.daemon import child, runtime
from llada_lsp.client import SERVER, LladaClient, inline, open_document
from tests.llada_lsp.lsp_helpers import DATA, ROOT, needs_model, position_of

PACKAGES = ("engine", "llada_lsp", "torch", "websockets", "kernels")


def hostile_repo(root: Path, canaries: Path) -> Path:
    """A workspace whose packages shadow ours and our dependencies; each writes a canary."""
    canaries.mkdir()
    for name in PACKAGES:
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(
            f"open({str(canaries / name)!r}, 'a').write('imported from the workspace\\n')\n")
    (root / "engine" / "daemon").mkdir()
    (root / "engine" / "daemon" / "__init__.py").write_text("")
    (root / "engine" / "daemon" / "cli.py").write_text(
        f"open({str(canaries / 'daemon')!r}, 'a').write('ran as the daemon\\n')\n")
    return root


def server_launcher() -> list[str]:
    """What the editors start: the console script next to this Python (else `SERVER`)."""
    script = Path(sys.executable).parent / "llada-lsp"
    return [str(script)] if script.exists() else list(SERVER)


@needs_model
@pytest.mark.asyncio(loop_scope="function")
async def test_auto_start_from_inside_a_hostile_repository_runs_none_of_it(tmp_path: Path,
                                                                          model_dir: Path) -> None:
    repo = hostile_repo(tmp_path / "repo", tmp_path / "canaries")
    run = tmp_path / "run"
    env = {**os.environ, "LLADA_RUNTIME_DIR": str(run), "OMP_NUM_THREADS": "1",
           "LLADA_MODEL": str(model_dir), "PYTHONPATH": str(ROOT)}
    text = (DATA / "shapes.py.txt").read_text()
    client = LladaClient()
    closed = False
    try:
        await client.start({"engine": "auto", "maxTokens": {"line": 8, "statements": 8, "block": 8}},
                           server_launcher(), env=env, cwd=str(repo), root_uri=repo.as_uri(), timeout=240)
        uri = (repo / "shapes.py").as_uri()
        open_document(client, uri, "python", text)
        # a statement in an empty line of a body: a suggestion that parses (the guard withholds
        # the ones that would not, and tiny-code's mid-line ones after `math.` often would not)
        spot = position_of(text, "def centroid(points: list[Point]) -> Point:\n    ")
        answer = await asyncio.wait_for(inline(client, uri, spot), 120)
        info = runtime.read_runtime(run)
        assert info is not None and runtime.pid_alive(int(info["pid"]))  # auto-start worked
        assert answer is not None and answer.items and answer.items[0].insert_text  # a completion arrived
        await client.close()
        closed = True
    finally:
        if not closed:  # a failure above
            with contextlib.suppress(Exception):  # noqa: BLE001 - teardown goes on
                await asyncio.wait_for(client.close(), 30)  # shutdown, exit (stop() alone can wait forever)
        await asyncio.to_thread(runtime.stop_daemon, run)
    assert sorted(p.name for p in (tmp_path / "canaries").iterdir()) == []
    log = (run / runtime.LOG_NAME).read_text()
    assert "ran as the daemon" not in log


def test_the_tools_server_command_ignores_the_current_directory(tmp_path: Path) -> None:
    """`SERVER` (`python -m llada_lsp`: the demo, the benches, the tests) started inside the
    repository imports nothing of it."""
    repo = hostile_repo(tmp_path / "repo", tmp_path / "canaries")
    out = subprocess.run([*SERVER, "--version"], cwd=repo, env=child.python_env(), capture_output=True,
                         text=True, timeout=60, check=True)
    assert out.stdout.startswith("llada-lsp ")
    assert list((tmp_path / "canaries").iterdir()) == []


def test_a_childs_pythonpath_keeps_only_absolute_entries(tmp_path: Path) -> None:
    """Empty and relative PYTHONPATH entries name the current directory (the workspace): a
    child gets the absolute ones, after the project's own root."""
    env = child.python_env({"PYTHONPATH": os.pathsep.join(["", ".", "src", str(tmp_path)]),
                            "PYTHONSTARTUP": "x.py"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(child.PACKAGE_ROOT), str(tmp_path)]
    assert "PYTHONSTARTUP" not in env
    repo = hostile_repo(tmp_path / "repo", tmp_path / "canaries")
    probe = subprocess.run([*child.python_command("engine.daemon.cli"), "--help"], cwd=repo,
                           env=child.python_env({**os.environ, "PYTHONPATH": f".{os.pathsep}engine"}),
                           capture_output=True, text=True, timeout=60, check=True)
    assert "serve" in probe.stdout and list((tmp_path / "canaries").iterdir()) == []
