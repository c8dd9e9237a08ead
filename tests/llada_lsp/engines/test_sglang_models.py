"""Which models SGLang serves and what a server does with LLaDA2.2 (llada_lsp.engines.sglang_models):
the facts the client and the FAKE server rely on, read from the pinned sglang 0.5.23 wheel's own
sources (parsed, not run: they import the CUDA stack), then the client against the fake: the
status reports block routing and in/del from what the servers report, and a model SGLang does
not serve as a diffusion model for this client (LLaDA-8B, Dream, SDAR) is refused by name."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from llada_lsp.engines.sglang_models import (
    DIFFUSION_ARCHITECTURES,
    INDEL_ALGORITHM,
    PROMPTED,
    capabilities,
)
from tests.fakes.checkpoint import LLADA22_KEYS, llada2_dir, llada22_dir
from tests.fakes.sglang import FakeSglang
from tests.llada_lsp.engines.sglang_helpers import client, collect, fake, request, started
from tests.llada_lsp.engines.sglang_wheel import sources

SRT = Path("sglang/srt")


@pytest.fixture(scope="module")
def wheel() -> Path:
    return sources()


def _function(tree: ast.Module, name: str) -> ast.AST:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name)


def _dict_keys(node: ast.AST, target: str) -> set[str]:
    """The constant keys of the dict literal assigned to `target` inside `node`."""
    for n in ast.walk(node):
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == target for t in n.targets):
            assert isinstance(n.value, ast.Dict)
            return {str(k.value) for k in n.value.keys if isinstance(k, ast.Constant)}
    raise AssertionError(f"no dict {target}")


def server_arg_fields(wheel: Path) -> set[str]:
    """Every server argument (`arg_groups/fields/*.py`: the namespaces `ServerArgs` assembles)."""
    names: set[str] = set()
    for f in sorted((wheel / SRT / "arg_groups" / "fields").glob("*.py")):
        for cls in ast.walk(ast.parse(f.read_text())):
            if isinstance(cls, ast.ClassDef):
                names |= {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return names


def test_the_diffusion_architectures_are_the_wheels(wheel: Path) -> None:
    config = ast.parse((wheel / SRT / "dllm" / "config.py").read_text())
    assert set(DIFFUSION_ARCHITECTURES) == _dict_keys(_function(config, "from_server_args"), "DLLM_PARAMS")
    assert PROMPTED in DIFFUSION_ARCHITECTURES
    entries = {m[1] for f in (wheel / SRT / "models").glob("*.py")
               for m in re.finditer(r"^EntryClass\s*=\s*\[?\s*(\w+)", f.read_text(), re.M)}
    assert PROMPTED in entries and not {"LLaDAModelLM", "DreamModel", "DreamForCausalLM"} & entries
    indel = (wheel / SRT / "dllm" / "algorithm" / "joint_threshold_indel.py").read_text()
    assert re.search(rf"^Algorithm = {INDEL_ALGORITHM}$", indel, re.M)
    llada2 = (wheel / SRT / "models" / "llada2.py").read_text()
    assert 'self.use_block_routing = getattr(config, "expert_capacity", None) is not None' in llada2


def test_what_the_client_and_the_fake_read_is_what_the_wheel_answers(wheel: Path, tmp_path: Path) -> None:
    """`/model_info`'s keys are the wheel's; `/server_info`'s are server arguments (the two the
    client reads among them) or the extras `server_info` and `build_server_info` add."""
    http = ast.parse((wheel / SRT / "entrypoints" / "http_server.py").read_text())
    model_keys = _dict_keys(_function(http, "model_info"), "result")
    fields = server_arg_fields(wheel)
    assert {"dllm_algorithm", "json_model_override_args", "model_path"} <= fields
    assert {"architectures", "model_type", "model_path"} <= model_keys
    srv = FakeSglang(tokenizer=llada2_dir(tmp_path / "tok"))
    assert set(srv.model_info()) == model_keys
    extras = {"startup_time", "internal_states", "version", "frontend"}  # http_server.py:server_info
    info = ast.unparse(_function(http, "server_info"))
    assert all(repr(k) in info for k in extras)
    got = set(srv.server_info())
    assert got - fields <= extras, got - fields - extras


def test_the_fake_refuses_indel_without_edit_ids_as_the_wheel_does(wheel: Path) -> None:
    config = (wheel / SRT / "dllm" / "config.py").read_text()
    assert "JointThresholdInDel is not supported for checkpoint" in config
    with pytest.raises(RuntimeError, match="delete_token_id and split_token_id"):
        FakeSglang(dllm_algorithm=INDEL_ALGORITHM, model_config={"architectures": [PROMPTED]})
    FakeSglang(dllm_algorithm=INDEL_ALGORITHM, model_config={"architectures": [PROMPTED]},
               json_model_override_args=json.dumps({"delete_token_id": 156930, "split_token_id": 156931}))


def test_capabilities_follow_the_algorithm_the_config_and_the_overrides() -> None:
    llada22, llada21 = {**LLADA22_KEYS}, {"architectures": [PROMPTED]}
    indel = {"dllm_algorithm": INDEL_ALGORITHM, "json_model_override_args": "{}"}
    assert capabilities([indel], llada22) == {"indel": True, "block_routing": True, "algorithms": [INDEL_ALGORITHM]}
    assert capabilities([{"dllm_algorithm": "JointThreshold"}], llada21)["block_routing"] is False
    over = {**indel, "json_model_override_args": json.dumps({"expert_capacity": 48})}
    assert capabilities([over], llada21)["block_routing"] is True
    assert capabilities([indel, {"dllm_algorithm": "JointThreshold"}], llada22)["indel"] is False  # one does not
    assert capabilities([], llada22) == {"indel": False, "block_routing": False, "algorithms": []}


@pytest.mark.asyncio(loop_scope="function")
async def test_the_status_reports_what_an_llada22_server_does(tmp_path: Path) -> None:
    tok = llada22_dir(tmp_path / "llada22")
    cfg: dict[str, Any] = json.loads((tok / "config.json").read_text())
    servers = [fake(tok, model_path="inclusionAI/LLaDA2.2-mini", dllm_algorithm=INDEL_ALGORITHM, model_config=cfg),
               fake(tok, model_path="inclusionAI/LLaDA2.2-mini", dllm_algorithm="JointThreshold", model_config=cfg)]
    urls = [await s.start() for s in servers]
    try:
        for url, indel in zip(urls, (True, False), strict=True):
            eng = await started(client(tok, {"speedy": [url]}))
            try:
                assert eng.info["block_routing"] and eng.info["indel"] is indel and not eng.caps.edits
                assert (await collect(eng.submit(request())))[-1].kind == "done"
            finally:
                await eng.close()
    finally:
        for s in servers:
            await s.stop()
    plain = llada2_dir(tmp_path / "llada2")  # LLaDA2.0/2.1: no expert_capacity
    srv = fake(plain)
    eng = await started(client(plain, {"speedy": [await srv.start()]}))
    try:
        assert eng.info["block_routing"] is False and eng.info["indel"] is False
    finally:
        await eng.close()
        await srv.stop()


def _as(tok: Path, arch: str, model_type: str) -> Path:
    cfg = json.loads((tok / "config.json").read_text())
    (tok / "config.json").write_text(json.dumps({**cfg, "architectures": [arch], "model_type": model_type,
                                                 "_name_or_path": f"tests/{arch}"}))
    return tok


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize(("path", "arch", "model_type", "says"), [
    ("GSAI-ML/LLaDA-8B-Instruct", "LLaDAModelLM", "llada", "not LLaDA-8B or Dream"),
    ("Dream-org/Dream-v0-Instruct-7B", "DreamModel", "Dream", "not LLaDA-8B or Dream"),
    ("JetLM/SDAR-8B-Chat", "SDARForCausalLM", "sdar", "SGLang serves SDAR as a diffusion model, but this client"),
])
async def test_a_model_sglang_does_not_serve_for_this_client_is_refused_by_name(
        tmp_path: Path, path: str, arch: str, model_type: str, says: str) -> None:
    tok = _as(llada2_dir(tmp_path / "tok"), arch, model_type)  # the local tokenizer is the same model
    server = fake(tok, model_path=path, architectures=(arch,))
    url = await server.start()
    eng = client(tok, {"speedy": [url]})
    try:
        await eng.start(lambda m, p: None)
        assert eng.state == "error" and path in (eng.error or "") and says in (eng.error or ""), eng.error
        assert server.requests_received == 0
    finally:
        await eng.close()
        await server.stop()
