"""What an engine backend can do, as its `info` advertises it: the language server degrades on
these instead of asking for what is not there. `EngineClient.caps` builds them once per `info`.

Keys of `EngineClient.info` read here (absent: the native engine's answer):
  edits        the engine revises text it already streamed (T2T edits): `llada/refine` follows;
               without them the answer is the finished text
  remask       syntax-guided remasking is available (`EngineClient.remask`)
  alternatives how many candidates one request can decode (1: the primary only)
  next_edit    the engine can fill next-edit sites: its done event reports the fill's weakest
               token confidence (`min_confidence`) that `nextEdit.threshold` judges; SGLang
               reports none, so no fill is asked of it (the sites get placeholders)
  names        the first identifier can be decoded among known names (`engine.api.Names`);
               SGLang cannot: its sampler takes no per-request token trie

Keys that only `llada/status` carries to the editors (no decision of the server rests on them):
  backend      "native" | "sglang"
  granularity  "step" (an event after each forward) | "block" (an event per committed block)
  presets      the presets (speedy, quality) this engine can serve
  block_routing LLaDA2.2's block-routed MoE runs as trained (SGLang: when every server routes
               by blocks, as 0.5.23's LLaDA2 model does for a checkpoint whose config, or
               `--json-model-override-args`, sets `expert_capacity`: `sglang_models.capabilities`)
  indel        the engine decodes with LLaDA2.2's insert/delete rule (SGLang: when every server
               runs `--dllm-algorithm JointThresholdInDel`, as its `/server_info` says; the
               edits then stay inside the server, which streams committed blocks: `edits` is
               false; native: for a model whose config names the edit tokens, its edits reach
               the editor as `llada/refine` insertions and deletions)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api import MAX_ALTERNATIVES


@dataclass(frozen=True)
class Capabilities:
    edits: bool = True
    remask: bool = True
    alternatives: int = MAX_ALTERNATIVES
    next_edit: bool = True
    names: bool = True

    @classmethod
    def of(cls, info: Mapping[str, Any]) -> Capabilities:
        """The capabilities `info` advertises; what it does not mention is the native engine's."""
        d = cls()
        alt = info.get("alternatives", d.alternatives)
        return cls(edits=bool(info.get("edits", d.edits)), remask=bool(info.get("remask", d.remask)),
                   alternatives=alt if isinstance(alt, int) and alt >= 1 else d.alternatives,
                   next_edit=bool(info.get("next_edit", d.next_edit)),
                   names=bool(info.get("names", d.names)))
