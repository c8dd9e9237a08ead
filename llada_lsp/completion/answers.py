"""What a completion request carries through the pipeline, and what it answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.api import EngineEvent
from llada_lsp.completion.guard import Guard
from llada_lsp.completion.plans import InfillPlan
from llada_lsp.completion.postprocess import Spec, open_brackets
from llada_lsp.engines.engine_base import EngineJob
from llada_lsp.text.documents import Document


@dataclass
class Answer:
    completion_id: str
    text: str
    kind: str
    offset: int
    word: str  # the identifier characters just before the cursor (for completion items)
    source: str  # "engine" | "cache" | "type_through"
    others: tuple[str, ...] = ()  # other candidates that fit, in rank order (for cycling)
    rest: str = ""  # the rest of the cursor's line its items replace (llada_lsp.completion.line_rest)


@dataclass(frozen=True)
class Selected:
    """LSP 3.18 `selectedCompletionInfo`: the editor's completion widget (or, in Neovim, a
    visual selection) would replace the range with `text`. An inline completion must then
    extend `text` and replace the same range: it is planned on the document as it would be
    with the item accepted, the cursor after `text`."""

    start: tuple[int, int]  # (line, character) in the negotiated position encoding
    end: tuple[int, int]
    text: str


@dataclass
class Cursor:
    """Where a request completes, as it arrived: the document as the editor has it (`real`,
    `real_offset`) and the document completed (`doc`, `offset`: with the selected item's text,
    `lead`, in place of its range, `span` in `real`); `tail`: the rest of the line an answer
    replaces."""

    uri: str
    serial: int  # the request's number: a newer one for the document supersedes it
    t0: float
    invoked: bool
    real: Document
    real_offset: int
    doc: Document
    offset: int
    selected: Selected | None = None  # the editor's selected completion item
    span: tuple[int, int] | None = None
    lead: str = ""
    tail: str = ""
    tree: Any = None  # the plan step's: the completed document's parse tree
    key: str = ""  # and the suggestion cache's key of its plan

    @property
    def cid(self) -> str:
        return f"{self.serial}"


@dataclass(frozen=True)
class Verdict:
    """A step's last word on a request: its answer, or none (`answer` None) and why."""

    answer: Answer | None
    why: str = ""


@dataclass
class InFlight:
    """A completion request in flight: what the later phases need, captured when it arrived,
    and how far it got (its engine job now, the engine time and stats so far)."""

    cid: str
    uri: str
    version: int
    doc_text: str
    offset: int
    plan: InfillPlan
    spec: Spec
    language_id: str
    tree: Any
    key: str
    t0: float
    speculative: bool = False
    engine_ms: float = 0.0  # time spent inside the engine (all its jobs) before the answer
    job: EngineJob | None = None  # the engine job now working for it (a remask's, later)
    stats: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # what post-processing last did to the text (why it is empty, when it is)
    lead: str = ""  # the selected item's text (Selected): refinements carry it in front
    revision: int = 0  # the document's revision (content changes) when captured
    candidates: int = 1  # how many candidates its engine job decodes (InfillPlan.candidates)
    rest: str = ""  # the rest of the cursor's line the item replaces: refinements keep it too

    @property
    def guard(self) -> Guard:
        """The parse-error check every text of this request passes (inactive without a tree)."""
        return Guard(self.language_id, self.doc_text, self.offset, self.rest, self.tree)


@dataclass
class Settled:
    """What `settle` drove a job to: the text to show, and the job and event it came from."""

    text: str
    job: EngineJob
    event: EngineEvent
    others: tuple[str, ...] = ()  # the other candidates that fit (engine.decoding.alternatives)
    header: str = ""  # a line that only opens a block, withheld: its body may be decoded (Settler.extend)
    kind: str = ""  # the span kind shown, when not the plan's (a header with its body: "block")
    cut: bool = False  # the guard cut it (more candidates may give a whole one: Settler.rescue)


def word_before(left: str) -> str:
    i = len(left)
    while i > 0 and (left[i - 1].isalnum() or left[i - 1] == "_"):
        i -= 1
    return left[i:]


def capture(doc: Document, offset: int, cid: str, plan: InfillPlan, key: str, tree: Any,
            t0: float, *, syntax_check: bool, speculative: bool = False, rest: str = "") -> InFlight:
    """The request at `offset` of `doc` as it stands now; `tree`: its parse tree, copied
    when `syntax_check` (later didChanges edit the live one); `rest`: the rest of the line
    its items replace (the guard applies a text over it, as accepting it would)."""
    text = doc.text
    ls = text.rfind("\n", 0, offset) + 1
    above_end = max(ls - 1, 0)
    above = ""
    while above_end > 0 and not above.strip():
        s = text.rfind("\n", 0, above_end) + 1
        above, above_end = text[s:above_end], s - 1
    assert plan.engine_plan is not None
    spec = Spec(kind=plan.kind, left=text[ls:offset], suffix=text[offset: offset + 4000],
                line_above=above, brace=plan.brace, keep_closer=plan.engine_plan.keep_closer,
                prefix_open=open_brackets(text[max(0, offset - 400): offset]))
    base_tree = tree.copy() if tree is not None and syntax_check else None
    return InFlight(cid, doc.uri, doc.version, text, offset, plan, spec, doc.language_id,
                    base_tree, key, t0, speculative, revision=doc.revision,
                    candidates=plan.candidates, rest=rest)
