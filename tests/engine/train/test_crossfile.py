"""Cross-file definitions (engine/train/crossfile.py), its training examples
(engine/train/crossfile_examples.py), and
bench/crossfile.py end to end on a couple of tasks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.api import ContextChunk
from engine.model.checkpoint import EMBEDDED_DIR
from engine.prompt.builder import PromptBuilder
from engine.prompt.prompt_format import render_context
from engine.train import crossfile as xf
from engine.train.crossfile_examples import CrossfileStream
from tests.bench.watchdog import WATCHDOG_S

ROOT = Path(__file__).resolve().parents[3]

CONFIG = '''"""Config."""
MAX_ITEMS = 16


class WidgetConfig:
    size = 3

    def __init__(self, size):
        self.size = size


def build_widget(config):
    return Widget(config)
'''
MODEL = '''import time
from .config import WidgetConfig, build_widget


class Widget:
    def __init__(self, config: WidgetConfig):
        self.config = config
        self.t = time.time()

    def grow(self):
        """Grow.

        Doc: build_widget(config) here is not code.
        """
        return build_widget(self.config) if len(self.items) < MAX_ITEMS else None
'''
FILES = {"pkg/w/__init__.py": "", "pkg/w/config.py": CONFIG, "pkg/w/model.py": MODEL}


def test_cross_names_are_other_files_definitions_the_target_does_not_bind() -> None:
    index = xf.PackageIndex(FILES.items())
    bound = xf.bound_names(MODEL)
    assert bound is not None and "Widget" in bound and "time" in bound
    line = "        return build_widget(self.config) if len(self.items) < MAX_ITEMS else None"
    assert index.cross_names(line, "pkg/w/model.py", bound) == ["build_widget", "MAX_ITEMS"]
    # the target's own class is no cross-file name, whatever another file does with it
    assert index.cross_names("w = Widget(cfg)", "pkg/w/model.py", bound) == []
    chunks = index.context_for(["build_widget"], "pkg/w/model.py")
    assert chunks == [ContextChunk("w/config.py", "def build_widget(config):\n    return Widget(config)")]
    cls = index.context_for(["WidgetConfig"], "pkg/w/model.py")[0].text
    assert cls.startswith("class WidgetConfig:") and "def __init__(self, size):" in cls


def test_names_skip_strings_comments_and_module_attributes() -> None:
    assert xf.names_in("x = fetch('build_widget')  # MAX_ITEMS") == ["fetch"]
    assert xf.names_in("t = time.monotonic() + clock.tick()", xf.module_names(MODEL)) == ["time", "clock", "tick"]
    lines = xf.code_lines(MODEL)
    assert lines is not None
    doc = next(i for i, ln in enumerate(MODEL.split("\n")) if "Doc:" in ln)
    assert doc not in lines and doc + 1 not in lines and doc + 2 in lines  # the closing quotes, then code


def test_training_examples_place_context_as_the_engine_does() -> None:
    builder = PromptBuilder.from_dir(EMBEDDED_DIR, 448)
    stream = CrossfileStream(FILES, builder, block=16, seed=0)
    seen_context = False
    for _ in range(40):
        got = stream.example()
        if got is None:
            continue
        key, prefix, middle, suffix, chunks = got
        assert key in FILES and middle
        assert all(c.path in ("w/config.py", "w/model.py", "w/__init__.py") for c in chunks)
        lay = builder.layout(prefix, suffix, heal=False, doc_key="w/model.py", context=chunks)
        if chunks and lay.context:
            seen_context = True
            text = builder.tok.decode(lay.ids)
            assert render_context(lay.context, "python") in text and all(
                any(c.path == p.path and c.text.startswith(p.text.rstrip()) for c in chunks) for p in lay.context)
    assert seen_context
    enc = stream.next()
    sp = builder.sp
    assert enc.ids[0] == sp.fim_suffix and enc.ids[enc.prompt_len - 1] == sp.fim_middle
    assert enc.middle_len % 16 == 0 and enc.ids[-1] == sp.end_of_middle


@pytest.mark.timeout(WATCHDOG_S)  # a whole bench run: a hang guard only, generous for a busy machine
def test_bench_runs_on_a_couple_of_tasks() -> None:
    r = subprocess.run([sys.executable, "bench/crossfile.py", "--tasks", "2", "--ordinary", "2"], cwd=ROOT,
                       capture_output=True, text=True, timeout=WATCHDOG_S)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["bench"] == "crossfile" and out["tasks"]["crossfile"] == 2 and out["tasks"]["ordinary"] == 2
    assert set(out["arms"]) == {"crossfile/none", "crossfile/near", "crossfile/defs", "crossfile/server",
                                "ordinary/none", "ordinary/unrelated"}
    for arm in out["arms"].values():
        assert arm["n"] == 2 and 0.0 <= arm["exact_match"] <= 1.0 and 0.0 <= arm["edit_sim"] <= 1.0
        lo, hi = arm["em_ci"]
        assert lo <= arm["exact_match"] <= hi
    assert out["arms"]["crossfile/none"]["context_chunks"] == 0
    assert out["arms"]["crossfile/defs"]["context_chunks"] >= 1  # every task has a definition to give
    assert out["arms"]["crossfile/defs"]["def_given"] == 1.0 and out["arms"]["crossfile/none"]["def_given"] == 0.0
    assert out["arms"]["ordinary/unrelated"]["context_chunks"] == 1
    assert set(out["effects"]) == {"crossfile/near", "crossfile/defs", "crossfile/server", "ordinary/unrelated"}
    assert isinstance(out["goal_doubles_em"], bool)


def test_a_training_batch_takes_its_share_of_crossfile_rows() -> None:
    import argparse

    import torch

    from engine.model.native import preset
    from engine.train.batches import next_batch
    from engine.train.data import ExampleStream

    builder = PromptBuilder.from_dir(EMBEDDED_DIR, 448)
    sp = builder.sp
    cfg = preset("tiny-code", vocab_size=builder.tok.get_vocab_size(), special=sp)
    plain = ExampleStream([CONFIG, MODEL], [1.0, 1.0], builder.tok, sp, cfg.block_size, seed=0)
    cross = CrossfileStream(FILES, builder, cfg.block_size, seed=0)
    drawn = []
    own_next = cross.next
    cross.next = lambda: drawn.append(1) or own_next()  # type: ignore[method-assign]
    args = argparse.Namespace(batch=4, distill_frac=0.5, crossfile=0.5, distill_suffix=0.0)
    b = next_batch(None, plain, None, torch.Generator().manual_seed(0), args, cfg, True, torch.device("cpu"),
                   None, cross)
    assert b.idx.shape[0] == 4 and len(drawn) == 2  # half the batch from the cross-file stream
    assert all(int(b.idx[r, 0]) == sp.fim_suffix for r in range(4))


@pytest.mark.timeout(WATCHDOG_S)
def test_gatherer_recall_without_the_model() -> None:
    r = subprocess.run([sys.executable, "bench/crossfile.py", "--tasks", "3", "--given-only", "448"], cwd=ROOT,
                       capture_output=True, text=True, timeout=WATCHDOG_S)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["bench"] == "crossfile_given" and out["tasks"] == 3
    assert set(out["rows"]) == {"near@448", "defs@448", "server@448"}
    assert out["rows"]["defs@448"]["given"] == 1.0  # the line's own definitions always define its names
    for row in out["rows"].values():
        assert 0.0 <= row["given"] <= 1.0 and 0.0 <= row["useful_chunks"] <= 1.0
