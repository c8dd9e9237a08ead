"""Every server option in docs/lsp.md (and llada_lsp/options.py) has a VS Code setting in
editors/vscode/package.json, and the machine-scoped ones are `"scope": "machine"` there and
restricted in untrusted workspaces."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from llada_lsp.options import MACHINE_SCOPED, Options
from tests.editors.conftest import ROOT

DOC = (ROOT / "docs" / "lsp.md").read_text()
PACKAGE = json.loads((ROOT / "editors" / "vscode" / "package.json").read_text())
PROPS: dict[str, dict[str, Any]] = PACKAGE["contributes"]["configuration"]["properties"]
RENAMED = {"languages": "enabledLanguages"}  # server option -> the extension's setting


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def doc_options() -> list[str]:
    """The option names in the first column of docs/lsp.md's option table."""
    table = DOC[DOC.index("| option | default | meaning |"):]
    table = table[:table.index("\n\n")]
    return re.findall(r"^\| `([A-Za-z.]+)` \|", table, flags=re.M)


def code_options(cls: type = Options, prefix: str = "") -> list[str]:
    """The options.py fields as the editors send them (camelCase, dotted for nested ones)."""
    out = []
    for f in dataclasses.fields(cls):
        name = prefix + camel(f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]
        nested = dataclasses.is_dataclass(default) and f.name != "sglang"  # sglang is one setting (an object)
        out += code_options(type(default), name + ".") if nested else [name]
    return out


def setting_of(option: str) -> dict[str, Any] | None:
    """The setting for `option`: `llada.<option>`, or a property of an object setting
    (`maxTokens.line` in `llada.maxTokens`)."""
    name = RENAMED.get(option, option)
    if f"llada.{name}" in PROPS:
        return PROPS[f"llada.{name}"]
    parent, _, key = name.rpartition(".")
    obj = PROPS.get(f"llada.{parent}")
    if obj is not None and key in obj.get("properties", {}):
        return obj
    return None


def test_the_doc_table_lists_every_option() -> None:
    listed = doc_options()
    assert len(listed) >= 30, listed
    assert set(code_options()) <= set(listed), set(code_options()) - set(listed)


def test_every_option_has_a_setting() -> None:
    missing = [o for o in doc_options() if setting_of(o) is None]
    assert not missing, f"docs/lsp.md options without a VS Code setting in package.json: {missing}"


def test_machine_scoped_options_are_machine_settings() -> None:
    line = next(x for x in DOC.splitlines() if x.startswith("Machine-scoped options:"))
    from_doc = set(re.findall(r"`([A-Za-z]+)`", line))
    assert from_doc == {camel(n) for n in MACHINE_SCOPED}, (from_doc, MACHINE_SCOPED)
    restricted = set(PACKAGE["capabilities"]["untrustedWorkspaces"]["restrictedConfigurations"])
    for option in sorted(from_doc) + ["serverPath"]:
        setting = setting_of(option)
        assert setting is not None and setting.get("scope") == "machine", option
        assert f"llada.{option}" in restricted, option
    # and no other setting claims to be machine-scoped
    machine = {k.removeprefix("llada.") for k, v in PROPS.items() if v.get("scope") == "machine"}
    assert machine == from_doc | {"serverPath"}, machine


def test_engine_setting_names_sglang_and_model_names_packaged_models() -> None:
    assert "sglang" in PROPS["llada.engine"]["markdownDescription"]
    assert "tiny-code" in PROPS["llada.model"]["markdownDescription"]
    assert PROPS["llada.device"]["enum"] == ["cpu", "cuda", "auto"]
