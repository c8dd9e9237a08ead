"""Does an edit add a parse error? The parse-error guard's judgement
(`llada_lsp.completion.guard`), in tree-sitter terms: the document's errors before and after
the edit, compared where the edit is, so that errors elsewhere in a file being typed do not
count.
"""

from __future__ import annotations

import re

import tree_sitter as ts

from llada_lsp.text.syntax import (
    count_errors,
    error_nodes,
    middle_error_spans,
    reparse_with,
)

# Blocks that may not be empty, nor hold statements at different columns (tree-sitter-python
# parses `def f():` with nothing under it, and an unexpected indent, without an error; Python
# raises IndentationError on both).
_STRICT_BLOCKS: dict[str, frozenset[str]] = {"python": frozenset({"block", "module"})}


def _touching(node: ts.Node, lo: int, hi: int) -> list[ts.Node]:
    """`node`'s children that touch bytes [lo, hi], found from `lo` by a cursor (tree-sitter's
    own scan; zero-width ones, an empty block, included): never a Python pass over all the
    children of a module of thousands of statements."""
    out: list[ts.Node] = []
    cursor = node.walk()
    if cursor.goto_first_child_for_byte(max(0, lo - 1)) is None:
        return out
    while True:
        c = cursor.node
        if c is None or c.start_byte > hi:
            return out
        if c.end_byte >= lo:
            out.append(c)
        if not cursor.goto_next_sibling():
            return out


def _child_from(node: ts.Node, b: int) -> ts.Node | None:
    """`node`'s child that holds byte `b`, else the first after it, else its last child."""
    cursor = node.walk()
    if cursor.goto_first_child_for_byte(b) is None:
        return node.child(node.child_count - 1) if node.child_count else None
    return cursor.node


def _columns(node: ts.Node, near: list[ts.Node]) -> set[int]:
    """The columns of `node`'s statements among `near` (its children by the edit) and the
    named ones just before and after them (comments aside): more than one is a ragged block
    there. Far statements do not count: the edit did not place them."""
    named = [c for c in near if c.is_named]
    if named:
        named = [x for x in (named[0].prev_named_sibling, *named, named[-1].next_named_sibling) if x is not None]
    elif near:
        named = [x for x in (near[0].prev_named_sibling, near[-1].next_named_sibling) if x is not None]
    return {c.start_point[1] for c in named if c.type != "comment"}


def _empty_block(node: ts.Node) -> bool:
    """A block with no statement (comments aside), its first statement sought from the start."""
    for i in range(node.named_child_count):
        c = node.named_child(i)
        if c is not None and c.type != "comment":
            return False
    return True


def _bad_blocks(language_id: str, root: ts.Node, lo: int, hi: int) -> int:
    """Blocks that are empty, or ragged by the edit (`_columns`), among the nodes that touch
    bytes [lo, hi]; a descent along the edit, whatever the size of the file."""
    kinds = _STRICT_BLOCKS.get(language_id)
    if not kinds:
        return 0
    n = 0
    stack = [root]
    while stack:
        cur = stack.pop()
        near = _touching(cur, lo, hi)
        if cur.type in kinds:
            n += (cur.type == "block" and _empty_block(cur)) or len(_columns(cur, near)) > 1
        stack.extend(near)
    return n


def _line_end_after(text: str, lines: int) -> int:
    """The end of the `lines`-th line of `text` that holds code, counting its first (partial)
    line as line 0 whatever it holds; len(text) when there are fewer."""
    pos = text.find("\n")
    seen = 0
    while pos >= 0 and seen < lines:
        nxt = text.find("\n", pos + 1)
        end = len(text) if nxt < 0 else nxt
        if text[pos + 1: end].strip():
            seen += 1
        if seen == lines:
            return end
        pos = nxt
    return len(text) if pos < 0 else pos


def _added(language_id: str, trees: tuple[ts.Tree, ts.Tree], before: str, removed: str,
           middle: str, after: str, window: bool = False) -> bool | None:
    """Whether the edit from the first tree to the second adds a parse error (see
    `edit_adds_error`); None when an error that starts above the edited lines runs into the
    edit (an unclosed bracket above: the lines cannot be judged in this tree). `window`: the
    trees are of the cursor's unit alone; there such an error leaves only the checks that
    do not depend on where it ends (an error away from the old ones, a bad block)."""
    old, new = trees
    enc = "utf-8"
    sb = len(before.encode(enc, "surrogatepass"))
    oe = sb + len(removed.encode(enc, "surrogatepass"))
    ne = sb + len(middle.encode(enc, "surrogatepass"))
    ls = sb - len(before[before.rfind("\n") + 1:].encode(enc, "surrogatepass"))
    old_nodes, new_nodes = error_nodes(old.root_node), error_nodes(new.root_node)
    above = {n.start_byte for n in old_nodes if n.start_byte < ls and not n.is_missing}
    swallowed = any(n.start_byte in above and n.end_byte > sb for n in new_nodes)
    if swallowed and not window:
        return None  # an error from above runs into the edit (an unclosed bracket)
    if not swallowed and count_errors(new.root_node) > count_errors(old.root_node):
        return True

    def moved(b: int) -> int:  # a byte of the old text, in the new one
        return b if b <= sb else (b - oe + ne if b >= oe else ne)

    # old errors where they are now; one the edit falls into keeps its two sides, not the new text
    olds = [(moved(n.start_byte), min(moved(n.end_byte), sb) if n.start_byte <= sb else moved(n.end_byte))
            for n in old_nodes]
    olds += [(ne, moved(n.end_byte)) for n in old_nodes if n.start_byte < sb and n.end_byte > oe]
    for n in new_nodes:
        if not any(s <= n.end_byte and n.start_byte <= e for s, e in olds):
            return True  # an error where there was none: the edit fixed one and broke another
    if _bad_blocks(language_id, new.root_node, sb, ne) > _bad_blocks(language_id, old.root_node, sb, oe):
        return True
    if swallowed:
        return False
    # the edited lines and the next line of code (where an unfinished header shows) parse
    hi = ne + len(after[: _line_end_after(after, 1)].encode(enc, "surrogatepass"))
    return any(n.end_byte >= ls and n.start_byte <= hi for n in new_nodes)


_UNIT_START = re.compile(r"[^\s)\]}#/*-]")


def _dedent(text: str, d: int, first: bool = True) -> str | None:
    """`text` with `d` leading columns taken off each line (not its first unless `first`);
    None when a line with code has less indentation than that."""
    lines = text.split("\n")
    out = []
    for k, line in enumerate(lines):
        if k == 0 and not first:
            out.append(line)
        elif line[:d].strip():
            return None
        else:
            out.append(line[d:])
    return "\n".join(out)


def _units(before: str, middle: str, after: str) -> list[tuple[str, str, str]]:
    """The statements that hold the cursor, outermost first, each as (before, middle, after)
    cut to it and dedented to column 0: a line above with less indentation than the cursor's
    line starts one (and the cursor's line, when it has code, the innermost), which ends
    before the next line below with no more indentation than its own."""
    rows = before.split("\n")
    cursor_row = rows[-1]
    limit = len(cursor_row) - len(cursor_row.lstrip(" \t"))
    starts: list[tuple[int, int]] = []  # (row, indentation)
    for r in range(len(rows) - 2, -1, -1):
        line = rows[r]
        ind = len(line) - len(line.lstrip(" \t"))
        if line.strip() and ind < limit and _UNIT_START.match(line, ind):
            starts.append((r, ind))
            limit = ind
            if ind == 0:
                break
    if cursor_row.strip():  # innermost: the statement the cursor's line starts
        starts.insert(0, (len(rows) - 1, len(cursor_row) - len(cursor_row.lstrip(" \t"))))
    out: list[tuple[str, str, str]] = []
    below = after.split("\n")
    for r, d in reversed(starts):
        end = next((k for k in range(1, len(below)) if below[k].strip()
                    and len(below[k]) - len(below[k].lstrip(" \t")) <= d), len(below))
        wb, wm, wa = (_dedent("\n".join(rows[r:]), d), _dedent(middle, d, first=False),
                      _dedent("\n".join(below[:end]), d, first=False))
        if wb is not None and wm is not None and wa is not None:
            out.append((wb, wm, wa))
    return out


WINDOW_CHARS = 64 * 1024  # a document this large is judged on a window around the edit (`windowed`)


def _char(text: str, data: bytes, b: int) -> int:
    """The character offset of byte `b` of `data` (`text` encoded)."""
    return b if len(data) == len(text) else len(data[:b].decode("utf-8", "surrogatepass"))


def windowed(base_tree: ts.Tree | None, before: str, removed: str, after: str
             ) -> tuple[ts.Tree | None, str, str]:
    """(tree, before, after) to judge an edit on: for a document of `WINDOW_CHARS` or more
    with its tree, the top-level statements the edit touches with the one before and the one
    after them, whole lines from column 0, as a document of their own (its tree is then
    parsed, small); else the whole document. A parse of the whole document costs about its
    size after the edit, whatever the edit (tree-sitter re-reduces every statement after
    it); the window costs about its own size. An error the edit makes cannot leave the
    window unseen: what it leaves open (a bracket, a string, a block) shows at the window's
    end, and an error from above that runs into the edit is a top-level node of the old tree
    the window starts with."""
    if base_tree is None or len(before) + len(after) < WINDOW_CHARS:
        return base_tree, before, after
    bb, ab = before.encode("utf-8", "surrogatepass"), after.encode("utf-8", "surrogatepass")
    sb = len(bb)
    oe = sb + len(removed.encode("utf-8", "surrogatepass"))
    root = base_tree.root_node
    at, to = _child_from(root, sb), _child_from(root, oe)
    if at is None or to is None:
        return base_tree, before, after
    first, last = at.prev_named_sibling or at, to.next_named_sibling or to
    if first.start_point[1] != 0:
        return base_tree, before, after  # not at a line's start (a ragged file): the whole document
    a = min(first.start_byte, bb.rfind(b"\n") + 1)
    z = max(last.end_byte, oe)
    end = ab.find(b"\n", z - oe)  # the window's last line whole
    z_after = len(ab) if end < 0 else end
    return None, before[_char(before, bb, a):], after[:_char(after, ab, z_after)]


def edit_adds_error(language_id: str, base_tree: ts.Tree | None, before: str, middle: str,
                    after: str, removed: str = "") -> bool:
    """Whether replacing `removed` by `middle` between `before` and `after` adds a parse
    error: more ERROR/MISSING nodes than before, or one that overlaps none of the old ones
    (moved by the edit), or (Python) a block around the edit left empty or ragged (an
    unexpected indent), or any error on the edited lines or the next line of code (a line
    being typed must come out whole). Errors elsewhere in the file do not count; where one
    from above runs into the edit (an unclosed bracket, a string being typed), the
    statements that hold the cursor are judged alone (`_units`). `base_tree`: the current
    tree of before+removed+after (copied, not changed); False without a grammar. A large document is judged on a window (`windowed`)."""
    base_tree, before, after = windowed(base_tree, before, removed, after)
    res = reparse_with(language_id, base_tree, before, middle, after, removed)
    if res is None:
        return False
    added = _added(language_id, res, before, removed, middle, after)
    units = _units(before, middle, after) if added is None else []
    for wb, wm, wa in units:  # outermost first: the first that can be judged alone
        local = reparse_with(language_id, None, wb, wm, wa, removed)
        added = None if local is None else _added(language_id, local, wb, removed, wm, wa)
        if added is not None:
            return added
    if units:  # still swallowed in the innermost: what does not depend on where it ends
        wb, wm, wa = units[-1]
        local = reparse_with(language_id, None, wb, wm, wa, removed)
        return local is not None and bool(_added(language_id, local, wb, removed, wm, wa, window=True))
    return bool(added)


def edit_error_spans(language_id: str, base_tree: ts.Tree | None, before: str, middle: str,
                     after: str, removed: str = "") -> list[tuple[int, int]]:
    """Character spans of `middle` inside the parse errors that putting it in place of
    `removed` adds (`syntax.middle_error_spans`); [] when it adds none (`edit_adds_error`)."""
    base_tree, before, after = windowed(base_tree, before, removed, after)
    res = reparse_with(language_id, base_tree, before, middle, after, removed)
    if res is None or not middle or not edit_adds_error(language_id, res[0], before, middle, after, removed):
        return []
    return middle_error_spans(res[1], before, middle)
