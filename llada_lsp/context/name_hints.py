"""The known names a completion request carries (`engine.api.Names`): the scope analysis of
`llada_lsp.context.names` plus what the workspace index knows (other files' top-level names, and the
top-level names of an imported module it parsed). One object per completion service."""

from __future__ import annotations

import bisect
from typing import Any

from engine.api import Names
from llada_lsp.context.name_queries import compiled
from llada_lsp.context.names import NameScopes, use_site
from llada_lsp.context.workspace_index import Entry, WorkspaceIndex
from llada_lsp.text.documents import Document


def top_level(entry: Entry) -> list[str]:
    """An entry's definitions not nested in another one (members are left out)."""
    out, end = [], -1
    for d in sorted(entry.defs, key=lambda d: (d.start, -d.end)):
        if d.start > end:
            out.append(d.name)
            end = d.end
    return out


class NameHints:
    def __init__(self, index: WorkspaceIndex) -> None:
        self.index = index
        self.scopes = NameScopes()
        self._generation = -1
        self._sorted: list[str] = []
        self._modules: dict[str, list[str] | None] = {}

    def hint(self, doc: Document, offset: int, tree: Any, keep_own_above: float) -> Names | None:
        """The names for the identifier the cursor ends, or None (not a use site, none known)."""
        site = use_site(doc.text, offset, doc.language_id, tree)
        if site is None:
            return None
        names = self.scopes.candidates(doc.uri, doc.language_id, doc.text, tree, site,
                                       self.index_names, self.module_names, self.members_of)
        return Names(site.typed, names, keep_own_above) if names else None

    def warm(self, language_id: str) -> None:
        """Compile the language's name queries now (a document of it opened), so that its
        first completion does not wait for them (`compiled` keeps them)."""
        compiled(language_id)

    def forget(self, uri: str) -> None:
        self.scopes.forget(uri)

    # -- the workspace index -----------------------------------------------------------------
    def _refresh(self) -> None:
        if self._generation == self.index.generation:
            return
        with self.index.lock:  # files on disk (open documents do not move the generation)
            entries = list(self.index.files.values())
            self._generation = self.index.generation
        self._sorted = sorted({n for e in entries for n in top_level(e)})
        self._modules = {}

    def index_names(self, typed: str) -> list[str]:
        """The index's top-level names that start with `typed` (bisect over a sorted list,
        rebuilt when the index changes)."""
        self._refresh()
        i = bisect.bisect_left(self._sorted, typed)
        out: list[str] = []
        while i < len(self._sorted) and self._sorted[i].startswith(typed) and len(out) < 64:
            out.append(self._sorted[i])
            i += 1
        with self.index.lock:
            opened = list(self.index.opened.values())
        for e in opened:  # other open documents: few, their names by prefix
            out.extend(n for n in e.by_name if n.startswith(typed) and n not in out)
        return out

    def members_of(self, base: str) -> list[str]:
        """The members (methods, fields) of class `base` as the index has it, for `self.` in a
        subclass: the definitions inside the first definition of that name that has members."""
        for e, i in self.index.lookup(base):
            d = e.defs[i]
            if d.members:
                starts = set(d.members)
                return [x.name for x in e.defs if x.start in starts and d.start < x.start <= d.end]
        return []

    def module_names(self, dotted: str) -> list[str] | None:
        """The top-level names of module `dotted` (`pkg.mod`) when the index parsed its file."""
        self._refresh()
        if dotted in self._modules:
            return self._modules[dotted]
        dotted = dotted.lstrip(".")  # relative: the package's own module (by its path's tail)
        if not dotted:
            return None
        tails = ("/" + dotted.replace(".", "/") + ".py", "/" + dotted.replace(".", "/") + "/__init__.py")
        found = None
        with self.index.lock:
            for key, e in [*self.index.opened.items(), *self.index.files.items()]:
                if key.endswith(tails):
                    found = top_level(e)
                    break
        self._modules[dotted] = found
        return found
