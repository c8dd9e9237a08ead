"""What the step loop needs from the engine that owns the model: its `Host`.

The step loop (`engine.decoding.scheduler`, its rows and text streams) sees the engine only
through this protocol: the model and its cache rows, a request's decoding state on a row,
the text of a sequence, and the prompt cache's rows. `engine.service.TextEngine` is the one
implementation. Decoding never imports the text engine, so the text engine's imports of
decoding run one way (tests/test_import_contracts.py counts type-only imports in cycles).
"""

from __future__ import annotations

from collections.abc import Hashable
from contextlib import AbstractContextManager
from typing import Protocol

from engine.api import CompletionRequest, Plan
from engine.decoding.decode import Sequence
from engine.decoding.policies import Policy
from engine.model.native import Transformer


class PromptRows(Protocol):
    """The prompt cache as the loop uses it (`engine.prompt.prompt_cache.PromptCache`): KV of
    a prompt's longest cached prefix restored into a row, a row's prompt stored, entries
    scoped to and dropped with their owner (a connection)."""

    def scoped(self, owner: Hashable) -> AbstractContextManager[None]: ...

    def restore(self, model: Transformer, row: int, key: str, tokens: list[int], owner: Hashable) -> int: ...

    def store(self, model: Transformer, row: int, key: str, tokens: list[int], owner: Hashable) -> None: ...

    def drop_owner(self, owner: Hashable) -> None: ...


class Host(Protocol):
    """The engine a step loop runs on."""

    model: Transformer  # the decoder over cache rows (setup_cache, config.block_size, forward)
    max_len: int  # positions of a cache row
    preset: str  # the preset of a plan that names none
    exact_cache: bool  # the model's KV is exact: prompts may be stored and restored

    @property
    def prompt_cache(self) -> PromptRows: ...

    def prepare(self, req: CompletionRequest, row: int, policy: Policy | None = None
                ) -> tuple[Sequence, str, int]:
        """`req`'s decoding state on cache `row`: (sequence, healed partial text, reused tokens)."""
        ...

    def fork(self, req: CompletionRequest, token: int, row: int, policy: Policy | None = None) -> Sequence:
        """A candidate of `req` on `row` whose first token is `token`."""
        ...

    def positions_for(self, seq: Sequence, partial: str, spans: list[tuple[int, int]]) -> list[int]:
        """Middle positions whose text overlaps character `spans` of the completion."""
        ...

    def text(self, seq: Sequence, plan: Plan, partial: str) -> str:
        """The text the sequence shows now (drafts and edits)."""
        ...

    def final_text(self, seq: Sequence, plan: Plan, partial: str) -> str:
        """The text of the finished sequence."""
        ...

    def alternative_texts(self, req: CompletionRequest, forks: list[Sequence], partial: str, primary: str
                          ) -> tuple[str, ...]:
        """The forks' final texts in rank order, without `primary` and repeats."""
        ...

