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


def test_diff_edits_roundtrip() -> None:
    for old, new in [("", "abc"), ("abc", ""), ("hello world", "hello there world"), ("same", "same")]:
        assert apply_edits(old, diff_edits(old, new)) == new
