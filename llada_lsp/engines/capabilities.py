"""What an engine backend can do, as its `info` advertises it (and `llada/status` carries to
editors): the language server degrades on these instead of asking for what is not there.

Keys in `EngineClient.info` (absent: the native engine's answer):
  backend      "native" | "sglang"
  granularity  "step" (an event after each forward) | "block" (an event per committed block)
  edits        the engine revises text it already streamed (T2T edits): `llada/refine` follows
  remask       syntax-guided remasking is available (`EngineClient.remask`)
  alternatives how many candidates one request can decode (1: the primary only)
  next_edit    next-edit suggestions are available
  presets      the presets (speedy, quality) this engine can serve
  block_routing LLaDA2.2's block-routed MoE runs as trained (native: yes; SGLang: when every
               server routes by blocks, as 0.5.23's LLaDA2 model does for a checkpoint whose
               config, or `--json-model-override-args`, sets `expert_capacity`:
               `sglang_models.capabilities`)
  indel        the engine decodes with LLaDA2.2's insert/delete rule (native: yes, for a model
               whose config names the edit tokens, and its edits reach the editor as
               `llada/refine` insertions and deletions; SGLang: when every server runs
               `--dllm-algorithm JointThresholdInDel`, as its `/server_info` says; the edits
               then stay inside the server, which streams committed blocks: `edits` is false)
  names        the first identifier can be decoded among known names (`engine.api.Names`);
               SGLang cannot: its sampler takes no per-request token trie
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api import MAX_ALTERNATIVES


@dataclass(frozen=True)
class Capabilities:
    backend: str = "native"
    granularity: str = "step"
    edits: bool = True
    remask: bool = True
    alternatives: int = MAX_ALTERNATIVES
    next_edit: bool = True
    block_routing: bool = True
    indel: bool = True
    names: bool = True

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> Capabilities:
        """The capabilities `info` advertises; what it does not mention is the native engine's."""
        d = cls()
        alt = info.get("alternatives", d.alternatives)
        return cls(backend=str(info.get("backend", d.backend)),
                   granularity=str(info.get("granularity", d.granularity)),
                   edits=bool(info.get("edits", d.edits)), remask=bool(info.get("remask", d.remask)),
                   alternatives=alt if isinstance(alt, int) and alt >= 1 else d.alternatives,
                   next_edit=bool(info.get("next_edit", d.next_edit)),
                   block_routing=bool(info.get("block_routing", d.block_routing)),
                   indel=bool(info.get("indel", d.indel)),
                   names=bool(info.get("names", d.names)))
