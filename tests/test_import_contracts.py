"""The import rules as contracts (tests/import_rules.py): the engine never imports the server;
kernels import neither; the server reaches torch only lazily through its in-process engine
client; a policy never imports the scheduler or the daemon; nothing the server or the daemon
runs imports the training code; the engine's parts (engine.decoding, engine.service, ...,
kernels) and the server's groups (llada_lsp.text, .engines, ..., and `llada_lsp.options` below
them all) import one way, with no exception, and no two modules of the server, the kernels or
the engine import each other, within a part or group too, type-only imports counted (the step loop sees `engine.decoding.host.Host`,
not the text engine; a daemon connection sees `DaemonSide`, not the daemon). Then the checker itself, on a fake tree that breaks every rule, so that a silent
checker cannot pass."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from import_rules import Rules, check, cycles, matches, part_graph, part_of, scan

ROOT = Path(__file__).resolve().parents[1]


def _named(graph: Mapping[str, object], package: str, module: str) -> str:
    """The one module of `package` called `module`, in whichever group it lives."""
    found = [m for m in graph if matches(m, [f"{package}.**.{module}"])]
    assert len(found) == 1, (module, found)
    return found[0]


# -- the server's groups (issue 45): a module is named by its own name, wherever it lives:
# before the relayout (llada_lsp.server) and after it (llada_lsp.lsp.server). A package is in
# no group (after the relayout `llada_lsp.context` is the context group's package, while the
# completion's `context` module is `llada_lsp.completion.context`).
TEXT = frozenset({"documents", "syntax", "positions"})
ENGINES = frozenset({"engine_base", "engine_client", "ws_engine", "ws_connection", "reconnect",
                     "sglang_engine", "sglang_servers", "sglang_chunks", "http_client",
                     "capabilities"})
CONTEXT = frozenset({"workspace", "workspace_index", "definitions", "safe_files", "names",
                     "name_queries", "name_hints"})
COMPLETION = frozenset({"completions", "plans", "cache", "speculation", "postprocess", "answers",
                        "refining", "weighing", "line_rest", "context", "reporting", "settling"})
NEXT_EDIT = frozenset({"next_edit", "edit_analysis", "edit_params", "edit_syntax", "edit_window",
                       "edit_fields"})
OPTIONS = frozenset({"options"})  # llada_lsp/options.py: the floor every other group reads
PROTOCOL = frozenset({"server", "stdio", "framing", "protocol", "limits", "methods", "session",
                      "suggestions"})
COMMANDS = frozenset({"cli", "demo", "doctor", "__main__"})
GROUPS = [TEXT, ENGINES, CONTEXT, COMPLETION, NEXT_EDIT, OPTIONS, PROTOCOL, COMMANDS]
GROUP_RULES: list[tuple[frozenset[str], frozenset[str], str]] = [
    (OPTIONS, TEXT | ENGINES | CONTEXT | COMPLETION | NEXT_EDIT | PROTOCOL | COMMANDS,
     "the options are the floor: they import no other group"),
    (TEXT, ENGINES | CONTEXT | COMPLETION | NEXT_EDIT | OPTIONS | PROTOCOL | COMMANDS,
     "the documents, trees and positions import no other group"),
    (ENGINES, TEXT | CONTEXT | COMPLETION | NEXT_EDIT | PROTOCOL | COMMANDS,
     "an engine client only transports: it imports no other group"),
    (CONTEXT, ENGINES | COMPLETION | NEXT_EDIT | PROTOCOL | COMMANDS,
     "the workspace context imports only the text group and the options"),
    (COMPLETION, NEXT_EDIT | PROTOCOL | COMMANDS,
     "a completion imports neither the next edit nor the protocol's server"),
    (NEXT_EDIT, COMPLETION | CONTEXT | PROTOCOL | COMMANDS,
     "the next edit imports neither the completion pipeline nor the protocol's server"),
    (PROTOCOL, COMMANDS, "the protocol never imports the commands"),
]


# after the relayout a module's group is also its package (a module the table does not know yet)
PACKAGES = {"text": TEXT, "engines": ENGINES, "context": CONTEXT, "completion": COMPLETION,
            "nextedit": NEXT_EDIT, "lsp": PROTOCOL}


def _in(graph: dict, module: str, group: frozenset[str]) -> bool:
    """`module` is a module (not a package) of the server named as one of `group`, or one of
    a group package's modules that no name set knows."""
    if not module.startswith("llada_lsp.") or any(m.startswith(module + ".") for m in graph):
        return False
    parts = module.split(".")
    name = parts[-1]
    if any(name in g for g in GROUPS):
        return name in group
    home = PACKAGES.get(parts[1]) if len(parts) == 3 else None
    return home is not None and home == group


def group_violations(graph: dict) -> list[str]:
    bad = []
    for m, edges in sorted(graph.items()):
        for importer, targets, why in GROUP_RULES:
            if _in(graph, m, importer):
                bad += [f"{m}:{e.line} imports {e.target}: {why}" for e in edges
                        if _in(graph, e.target, targets) and not _in(graph, e.target, importer)]
    return bad


def test_the_servers_groups_keep_their_import_rules() -> None:
    graph = scan(ROOT, ["llada_lsp"])
    assert group_violations(graph) == []
    # every name is a module of this tree (edit_fields may not be yet), and each module of the
    # server is in exactly one group (or is a command, a sample or the bench's client)
    for name in frozenset().union(*GROUPS) - {"edit_fields"}:
        assert any(_in(graph, m, frozenset({name})) for m in graph), name
    for m in graph:
        if m.count(".") and not matches(m, ["llada_lsp.samples", "llada_lsp.**.client"]) \
                and not any(o.startswith(m + ".") for o in graph):
            assert sum(_in(graph, m, g) for g in GROUPS) == 1, m


def test_the_group_rules_catch_a_crossing() -> None:
    from import_rules import Edge
    graph = {"llada_lsp.engines.ws_engine": [Edge("llada_lsp.engines.ws_engine",
                                                  "llada_lsp.completion.plans", 3)],
             "llada_lsp.completion.plans": [Edge("llada_lsp.completion.plans",
                                                 "llada_lsp.lsp.server", 4, lazy=True)],
             "llada_lsp.context.names": [Edge("llada_lsp.context.names", "llada_lsp.text.syntax", 1)],
             "llada_lsp.engines.new_transport": [Edge("llada_lsp.engines.new_transport",
                                                      "llada_lsp.lsp.server", 2)],
             "llada_lsp.options": [Edge("llada_lsp.options", "llada_lsp.text.syntax", 5)],
             "llada_lsp.lsp.server": [], "llada_lsp.text.syntax": []}
    assert group_violations(graph) == [
        "llada_lsp.completion.plans:4 imports llada_lsp.lsp.server: a completion imports neither "
        "the next edit nor the protocol's server",
        "llada_lsp.engines.new_transport:2 imports llada_lsp.lsp.server: an engine client only "
        "transports: it imports no other group",  # a module no name set knows: its package's
        "llada_lsp.engines.ws_engine:3 imports llada_lsp.completion.plans: an engine client only "
        "transports: it imports no other group",
        "llada_lsp.options:5 imports llada_lsp.text.syntax: the options are the floor: they import "
        "no other group"]


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
        (_named(graph, "llada_lsp", "engine_client"), rules.torch_gate),
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
    assert part_of("llada_lsp.nextedit.next_edit", rules.parts) == "llada_lsp.nextedit"
    assert part_of("llada_lsp.cli", rules.parts) == "llada_lsp.cli"  # a command: a group of its own
    assert {"llada_lsp.text", "llada_lsp.engines", "llada_lsp.context", "llada_lsp.completion",
            "llada_lsp.nextedit", "llada_lsp.lsp"} <= set(part_graph(graph, rules.parts))
    for name in ("llada_lsp.completions", "kernels.moe", "engine.decoding.scheduler",
                 "engine.daemon.server", "engine.daemon.runtime", "engine.train.train"):
        assert matches(name, rules.acyclic), name


def test_the_step_loop_sees_the_host_not_the_text_engine() -> None:
    """Decoding imports nothing of engine.service, not even for annotations."""
    graph = scan(ROOT, Rules().packages)
    into_service = [e for m, es in graph.items() if m.startswith("engine.decoding") for e in es
                    if e.target == "engine.service"]
    assert "engine.decoding.host" in graph and into_service == []


def test_the_servers_groups_import_one_way() -> None:
    """No two of the server's groups import each other (issue 53: lsp and nextedit did, through
    the options that lived in lsp/), the options counted as a group like any other."""
    parts = part_graph(scan(ROOT, ["llada_lsp"]), Rules().parts)
    assert part_of("llada_lsp.options", Rules().parts) == "llada_lsp.options"
    assert part_of("llada_lsp.lsp.server", Rules().parts) == "llada_lsp.lsp"
    assert any(e.target == "llada_lsp.options" for e in parts["llada_lsp.nextedit"])  # it did scan
    assert [e for e in parts["llada_lsp.options"] if e.target.startswith("llada_lsp")] == []  # the floor
    assert cycles(parts, "llada_lsp") == []


def test_the_servers_import_graph_has_no_cycle() -> None:
    graph = scan(ROOT, ["llada_lsp"])
    completions = _named(graph, "llada_lsp", "completions")
    assert graph[completions]  # it did scan
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
    "engine/daemon/server.py": ("from engine.daemon import connection\n\ndef serve():\n"
                                "    from engine import trainer_glue\n"),
    # two files of one part, tied only by an annotation
    "engine/daemon/connection.py": ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                    "    from engine.daemon.server import Daemon\n"),
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
    # two server groups: lsp imports nextedit, which imports lsp's framing (a cycle) and the
    # options (the floor below both: no cycle)
    "llada_lsp/options.py": "",
    "llada_lsp/lsp/__init__.py": "",
    "llada_lsp/lsp/framing.py": "from llada_lsp.options import Options\n",
    "llada_lsp/lsp/limits.py": "from llada_lsp.nextedit import edits\n",
    "llada_lsp/nextedit/__init__.py": "",
    "llada_lsp/nextedit/edits.py": "from llada_lsp.options import Options\nfrom llada_lsp.lsp import framing\n",
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
    # two server groups importing each other; the options, the floor both read, close no cycle
    assert hit("import cycle between parts: llada_lsp.lsp (llada_lsp.lsp.limits:1) -> llada_lsp.nextedit "
               "(llada_lsp.nextedit.edits:2) -> llada_lsp.lsp: parts import one way"), text
    assert "options" not in text, text
    # two files of one part, through a type-only import (and the cross-part cycles file by file)
    assert hit("import cycle: engine.daemon.connection (engine.daemon.connection:3 type-only) -> "
               "engine.daemon.server (engine.daemon.server:1) -> engine.daemon.connection: modules of "
               "engine import one way"), text
    assert hit("import cycle: engine.decoding.loop (engine.decoding.loop:3 type-only) -> engine.service"), text
    assert len(found) == 15, text


def test_the_checker_finds_cycles(fake_tree: Path) -> None:
    graph = scan(fake_tree, ["llada_lsp"])
    assert cycles(graph, "llada_lsp") == [["llada_lsp.plans", "llada_lsp.server", "llada_lsp.plans"]]
