"""The import rules as contracts (tests/import_rules.py): the engine never imports the server;
kernels import neither; the server reaches torch only lazily through its in-process engine
client; a policy never imports the scheduler or the daemon; nothing the server or the daemon
runs imports the training code; the engine's parts (engine.decoding, engine.service, ...,
kernels) import one way, and the server's, the kernels' and decoding's modules have no cycle,
type-only imports counted (the step loop sees `engine.decoding.host.Host`, not the text
engine). Then the checker itself, on a fake tree that breaks every rule, so that a silent
checker cannot pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_rules import Rules, check, cycles, matches, part_graph, part_of, scan

ROOT = Path(__file__).resolve().parents[1]


def test_the_project_keeps_its_import_rules() -> None:
    assert check(ROOT) == []


def test_the_rules_name_the_real_modules() -> None:
    """The patterns still name this tree's modules after a regrouping: a pattern that names
    nothing would let its rule pass silently."""
    graph = scan(ROOT, Rules().packages)
    rules = Rules()
    for name, group in [
        ("engine.decoding.policies", rules.policies),
        ("engine.decoding.policies.threshold", rules.policies),
        ("engine.decoding.scheduler", rules.daemon),
        ("engine.decoding.jobs", rules.daemon),
        ("engine.daemon.server", rules.daemon),
        ("engine.daemon.connection", rules.daemon),
        ("engine.daemon.cli", rules.daemon),
        ("engine.daemon.runtime", rules.daemon),
        ("engine.train.train", rules.training),
        ("llada_lsp.engine_client", rules.torch_gate),
    ]:
        assert name in graph, name
        assert matches(name, group), name
    # the decoder, the model and the text engine are no part of the daemon's group
    for name in ("engine.decoding.decode", "engine.decoding.local", "engine.model.native",
                 "engine.service", "engine.api"):
        assert name in graph and not matches(name, rules.daemon), name
    # the parts the one-way rule compares, and the packages kept free of cycles
    assert part_of("engine.decoding.stream", rules.parts) == "engine.decoding"
    assert part_of("engine.service", rules.parts) == "engine.service"
    assert part_of("kernels.moe", rules.parts) == "kernels"
    assert {"engine.decoding", "engine.service", "engine.model", "engine.prompt", "engine.daemon",
            "kernels"} <= set(part_graph(graph, rules.parts))
    for name in ("llada_lsp.completions", "kernels.moe", "engine.decoding.scheduler"):
        assert matches(name, rules.acyclic), name


def test_the_step_loop_sees_the_host_not_the_text_engine() -> None:
    """Decoding imports nothing of engine.service, not even for annotations."""
    graph = scan(ROOT, Rules().packages)
    into_service = [e for m, es in graph.items() if m.startswith("engine.decoding") for e in es
                    if e.target == "engine.service"]
    assert "engine.decoding.host" in graph and into_service == []


def test_the_servers_import_graph_has_no_cycle() -> None:
    graph = scan(ROOT, ["llada_lsp"])
    assert "llada_lsp.completions" in graph and graph["llada_lsp.completions"]  # it did scan
    assert cycles(graph, "llada_lsp") == []


@pytest.mark.parametrize(("name", "pattern", "expected"), [
    ("engine.scheduler", "engine.**.scheduler", True),
    ("engine.daemon.scheduler", "engine.**.scheduler", True),  # regrouped into a subpackage
    ("engine.scheduler.queue", "engine.**.scheduler", True),
    ("engine.schedulers", "engine.**.scheduler", False),
    ("engine_tools", "engine", False),
    ("engine.daemon.jobs", "engine.daemon.*", True),
    ("llada_lsp.engines.inprocess_torch", "llada_lsp.**.inprocess*", True),
])
def test_patterns(name: str, pattern: str, expected: bool) -> None:
    assert matches(name, [pattern]) is expected


FAKE = {
    "engine/__init__.py": "",
    "engine/api.py": "from dataclasses import dataclass\n",
    "engine/heavy.py": "import torch\n",
    "engine/daemon/__init__.py": "",
    "engine/daemon/scheduler.py": "from engine.policies import greedy\n",
    "engine/daemon/server.py": ("def serve():\n    from engine import trainer_glue\n"),
    "engine/trainer_glue.py": "from engine.train.loop import fit\n",
    "engine/train/__init__.py": "",
    "engine/train/loop.py": "def fit():\n    pass\n",
    "engine/policies/__init__.py": "",
    "engine/policies/greedy.py": "from ..daemon import scheduler\n",  # relative, resolved
    "engine/bad.py": "def f():\n    import llada_lsp.server\n",
    # a text engine and its step loop, tied only by an annotation: still a cycle
    "engine/service.py": "from engine.decoding import loop\n",
    "engine/decoding/__init__.py": "",
    "engine/decoding/loop.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                "    from engine.service import Engine\n"),
    "kernels/__init__.py": "import torch\nfrom engine import api\n",
    "kernels/fused.py": "from llada_lsp import cli\n",
    "llada_lsp/__init__.py": "",
    "llada_lsp/cli.py": "import engine.api\n",
    "llada_lsp/server.py": ("from typing import TYPE_CHECKING\nfrom llada_lsp import plans\n"
                            "if TYPE_CHECKING:\n    import torch\n"),
    "llada_lsp/plans.py": "from llada_lsp import server\nfrom engine.heavy import x\n",
    "llada_lsp/engine_client.py": ("import transformers\n\ndef load():\n"
                                   "    import torch\n    from engine import heavy\n"),
}


@pytest.fixture
def fake_tree(tmp_path: Path) -> Path:
    for rel, text in FAKE.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_checker_reports_each_broken_rule(fake_tree: Path) -> None:
    found = check(fake_tree, Rules())
    text = "\n".join(found)

    def hit(line: str) -> bool:
        return any(f.startswith(line) for f in found)

    # the engine imports the server (lazily still counts)
    assert hit("engine.bad:2 imports llada_lsp.server: the engine never imports the server"), text
    # kernels import the engine and the server
    assert hit("kernels:2 imports engine.api: kernels import neither"), text
    assert hit("kernels.fused:1 imports llada_lsp.cli: kernels import neither"), text
    # a policy imports the scheduler, found through a relative import into a subpackage
    assert hit("engine.policies.greedy:1 imports engine.daemon.scheduler: a policy never"), text
    # the server reaches torch through an engine module, outside the engine client
    assert hit("llada_lsp.plans:2 imports engine.heavy: the server reaches torch "
               "(engine.heavy -> torch) only through"), text
    # the engine client imports transformers at module level; its lazy imports are fine
    assert hit("llada_lsp.engine_client:1 imports transformers: the in-process engine client "
               "imports torch (transformers) only inside functions"), text
    assert not hit("llada_lsp.engine_client:4") and not hit("llada_lsp.engine_client:5"), text
    # a type-only import runs nothing; a torch-free engine module is fine; the server's own
    # module that imports the culprit is not reported again
    assert not hit("llada_lsp.server") and not hit("llada_lsp.cli"), text
    # the daemon's server runs the training code, lazily and through another module
    assert hit("engine.daemon.server runs engine.train (engine.daemon.server -> "
               "engine.trainer_glue -> engine.train): nothing the server or the daemon runs"), text
    # parts importing each other: at module level, and through a type-only import
    assert hit("import cycle between parts: engine.daemon (engine.daemon.scheduler:1) -> engine.policies "
               "(engine.policies.greedy:1) -> engine.daemon"), text
    assert hit("import cycle between parts: engine.decoding (engine.decoding.loop:3 type-only) -> "
               "engine.service (engine.service:1) -> engine.decoding"), text
    # the server's modules importing each other
    assert hit("import cycle: llada_lsp.plans (llada_lsp.plans:1) -> llada_lsp.server "
               "(llada_lsp.server:2) -> llada_lsp.plans: modules of llada_lsp import one way"), text
    assert len(found) == 10, text


def test_the_checker_finds_cycles(fake_tree: Path) -> None:
    graph = scan(fake_tree, ["llada_lsp"])
    assert cycles(graph, "llada_lsp") == [["llada_lsp.plans", "llada_lsp.server", "llada_lsp.plans"]]
