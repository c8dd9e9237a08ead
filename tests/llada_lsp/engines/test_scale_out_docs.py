"""docs/scale-out.md's commands against the real things: every `sglang.launch_server` flag is one
the pinned 0.5.23 wheel declares (its server-argument fields become `--field-name` flags,
`srt/arg_groups/arg_utils.py`), `--trust-remote-code` is there (no `llada2_moe` config class
exists in SGLang or transformers), each decoder YAML holds only keys its algorithm reads
(`srt/dllm/algorithm/joint_threshold.py`, `joint_threshold_indel.py`) and no `block_size`, and every router flag is one
the real `sglang-router` 0.3.2 accepts (its `--help`)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.llada_lsp.engines.sglang_wheel import sources

DOC = Path(__file__).resolve().parents[3] / "docs" / "scale-out.md"


def blocks(lang: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    return [b.replace("\\\n", " ") for b in re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)]


def commands(marker: str) -> list[str]:
    return [line for b in blocks("sh") for line in b.splitlines() if marker in line]


def flags(cmd: str) -> list[str]:
    return re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", cmd)


def test_launch_commands_use_flags_the_wheel_declares_and_trust_remote_code() -> None:
    root = sources() / "sglang" / "srt" / "arg_groups"
    declared = "\n".join(p.read_text(encoding="utf-8") for p in root.rglob("*.py"))
    cmds = commands("sglang.launch_server")
    assert len(cmds) >= 2
    for cmd in cmds:
        assert "--trust-remote-code" in flags(cmd), cmd
        for flag in flags(cmd):
            field = flag[2:].replace("-", "_")
            assert re.search(rf"^\s+{field}: ", declared, flags=re.M) or f'"{flag}"' in declared, \
                f"{flag} is not a flag of sglang 0.5.23 ({cmd})"
    assert all("--tp " not in c for c in cmds)


def test_decoder_yaml_holds_only_keys_its_algorithm_reads() -> None:
    """A YAML whose comment names JointThresholdInDel: that algorithm's keys; the others:
    JointThreshold's."""
    read = {}
    for name, file in (("JointThreshold", "joint_threshold.py"), ("JointThresholdInDel", "joint_threshold_indel.py")):
        code = (sources() / "sglang" / "srt" / "dllm" / "algorithm" / file).read_text(encoding="utf-8")
        read[name] = set(re.findall(r'algorithm_config\.get\(\s*"([a-z_]+)"', code))
        assert {"threshold", "edit_threshold", "max_post_edit_steps"} <= read[name]
    yamls = blocks("yaml")
    assert len(yamls) == 3 and sum("(JointThresholdInDel)" in y for y in yamls) == 1
    for y in yamls:
        keys = {line.split(":")[0].strip() for line in y.splitlines() if line.strip() and not line.startswith("#")}
        algo = "JointThresholdInDel" if "(JointThresholdInDel)" in y else "JointThreshold"
        assert keys <= read[algo] and "block_size" not in keys, keys


def test_router_commands_use_flags_the_real_router_accepts() -> None:
    pytest.importorskip("sglang_router", reason="the dev extra sglang-router==0.3.2 is not installed")
    helptext = subprocess.run([sys.executable, "-m", "sglang_router.launch_router", "--help"],
                              capture_output=True, text=True, timeout=120).stdout
    cmds = commands("sglang_router.launch_router")
    assert cmds
    for cmd in cmds:
        for flag in flags(cmd):
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helptext), f"{flag} is not a router flag"
    assert any("--health-check-endpoint" in c and "/ready" in c for c in cmds)
