"""Text stop rules."""

from __future__ import annotations

from engine.api import Plan, apply_edits, diff_edits
from engine.decoding.stops import cut_text, stop_index


def test_line_rule_cuts_at_newline() -> None:
    assert cut_text("x = 1\ny = 2", Plan(stop="line")) == ("x = 1", True)
    assert stop_index("x = 1", Plan(stop="line")) is None


def test_dedent_rule_cuts_before_a_shallower_line() -> None:
    text = "return a\n    b = 2\nclass X:\n"
    assert cut_text(text, Plan(stop="dedent", indent="    ")) == ("return a\n    b = 2", True)
    # a shallower line is only known once it has a non-blank character
    assert stop_index("x = 1\n", Plan(stop="dedent", indent="    ")) is None


def test_brace_rule_stops_at_the_scope_closer() -> None:
    text = "return a + b;\n}\nfunction g() {"
    assert cut_text(text, Plan(stop="brace", indent="  "))[0] == "return a + b;"
    assert cut_text(text, Plan(stop="brace", indent="  ", keep_closer=True))[0] == "return a + b;\n}"
    # brackets opened by the completion itself do not stop it
    assert stop_index("foo(\n  1,\n)", Plan(stop="brace", indent="  ")) is None


def test_blank_line_and_max_lines() -> None:
    assert cut_text("a()\nb()\n\nc()", Plan(stop="blank_line"))[0] == "a()\nb()"
    assert cut_text("a\nb\nc\nd", Plan(max_lines=2))[0] == "a\nb"


def test_statements_end_at_a_blank_line_or_where_their_body_ends() -> None:
    """`blank_line` with an indent (the language server's statements in an indented body) also
    stops at a dedent: the one stop rule, which the server no longer repeats."""
    plan = Plan(stop="blank_line", indent="    ", max_lines=8)
    assert cut_text("a = 1\n    b = 2\nprint(a)", plan) == ("a = 1\n    b = 2", True)
    assert stop_index("a = 1\n    b = 2\n", plan) is None  # not known before the line has text
    assert cut_text("a = 1\nprint(a)", Plan(stop="blank_line"))[0] == "a = 1\nprint(a)"  # no indent: no dedent
    # a dedent inside brackets the completion opened is a continuation line, not the body's end
    assert cut_text("x = f(\n1)\n    y = 2", plan)[0] == "x = f(\n1)\n    y = 2"


def test_indentation_is_compared_in_columns() -> None:
    """A tab counts to the next multiple of 4: two spaces are shallower than a tab's body."""
    assert cut_text("a\n  b", Plan(stop="dedent", indent="\t"))[0] == "a"
    assert cut_text("a\n    b", Plan(stop="dedent", indent="\t"))[0] == "a\n    b"
    assert cut_text("a\n\tb", Plan(stop="dedent", indent="    "))[0] == "a\n\tb"


def test_diff_edits_roundtrip() -> None:
    for old, new in [("", "abc"), ("abc", ""), ("hello world", "hello there world"), ("same", "same")]:
        assert apply_edits(old, diff_edits(old, new)) == new
