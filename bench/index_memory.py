"""Memory of the workspace index (llada_lsp.context.workspace_index): resident memory per
indexed byte (issue 49 §4 saw about 8x).

    python bench/index_memory.py [--quick] [--sizes 2,4,8,16] [--language python]

A workspace of real code (this repository's own Python files, copied under distinct names
until it holds the asked-for MiB) is indexed by `WorkspaceIndex.scan` in a fresh process per
size, with the index's limits raised to hold it all; that process reports its RSS (VmRSS,
after a warm-up parse so that the grammars and the parser are counted before) before and after
the scan (after a garbage collection), the bytes indexed, and what the index keeps (characters
of definition text, entries, definitions). The ratio `rss_per_byte` is the RSS growth over the
bytes indexed; `kept_per_byte` the definition text kept over the same bytes (the floor a
text-keeping index cannot go under, about 1); `rss_per_cost` the RSS growth over what the
index counts against `workspaceIndex.maxBytes` (`Entry.cost`: the files' bytes plus
`DEF_COST` per definition), which should stay near 1 whatever the shape. Two shapes: `code` (real files) and `tiny`
(the worst case for per-definition overhead: files of 2,000 one-line definitions). Prints a
table and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOURCES = ("llada_lsp", "engine", "bench", "tests")


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def make_tiny(dest: Path, mib: float) -> tuple[int, int]:
    """The worst case for the index's overhead: files of 2,000 one-line definitions with
    distinct names (`v_3_17 = 17`), until `mib` MiB: (files, bytes)."""
    target = int(mib * (1 << 20))
    total = count = 0
    while total < target:
        text = "".join(f"v_{count}_{i} = {i}\n" for i in range(2000))
        (dest / f"t{count}.py").write_text(text)
        total += len(text)
        count += 1
    return count, total


def make_workspace(dest: Path, mib: float) -> tuple[int, int]:
    """Copies of this repository's Python files under `dest` until `mib` MiB: (files, bytes)."""
    files = sorted(p for s in SOURCES for p in (ROOT / s).rglob("*.py") if 0 < p.stat().st_size <= 200_000)
    target = int(mib * (1 << 20))
    total = count = 0
    copy = 0
    while total < target:
        for p in files:
            if total >= target:
                break
            out = dest / f"c{copy}" / p.relative_to(ROOT)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, out)
            total += p.stat().st_size
            count += 1
        copy += 1
    return count, total


def child(workspace: Path, language: str) -> dict[str, Any]:
    """Index `workspace` in this process and measure it."""
    from llada_lsp.context.definitions import extract_definitions
    from llada_lsp.context.workspace_index import WorkspaceIndex

    extract_definitions(language, (ROOT / "llada_lsp" / "context" / "workspace.py").read_text())  # warm-up
    index = WorkspaceIndex(max_files=10**6, max_bytes=1 << 34)
    index.set_roots([workspace.as_uri()])
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    parsed = index.scan(language, max_s=3600)
    seconds = time.perf_counter() - t0
    gc.collect()
    after = rss_bytes()
    indexed = sum(e.stamp[1] for e in index.files.values())
    kept = sum(e.chars() for e in index.files.values())
    cost = sum(e.cost() for e in index.files.values())
    return {"files": parsed, "indexed_bytes": indexed, "rss_delta": after - before,
            "rss_per_byte": round((after - before) / max(1, indexed), 2),
            "rss_per_cost": round((after - before) / max(1, cost), 2),
            "kept_per_byte": round(kept / max(1, indexed), 2),
            "definitions": sum(len(e.defs) for e in index.files.values()),
            "names": len(index.names), "scan_s": round(seconds, 2)}


def measure(mib: float, language: str, shape: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="llada-index-mem-") as tmp:
        (make_tiny if shape == "tiny" else make_workspace)(Path(tmp), mib)
        out = subprocess.run([sys.executable, __file__, "--child", tmp, "--language", language],
                             capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return {"mib": mib, "shape": shape, **json.loads(out.strip().splitlines()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one small workspace (0.5 MiB)")
    ap.add_argument("--sizes", default="2,4,8,16", help="workspace sizes in MiB")
    ap.add_argument("--language", default="python")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.language)))
        return
    sizes = [0.5] if args.quick else [float(s) for s in args.sizes.split(",")]
    rows = [measure(m, args.language, shape) for shape in ("code", "tiny") for m in sizes]
    print(f"{'shape':>5} {'MiB':>5} {'files':>6} {'indexed':>10} {'RSS +':>10} {'RSS/byte':>9} {'kept/byte':>9} "
          f"{'RSS/cost':>8} {'defs':>7} {'scan s':>7}")
    for r in rows:
        print(f"{r['shape']:>5} {r['mib']:>5} {r['files']:>6} {r['indexed_bytes']:>10} {r['rss_delta']:>10} "
              f"{r['rss_per_byte']:>9} {r['kept_per_byte']:>9} {r['rss_per_cost']:>8} {r['definitions']:>7} {r['scan_s']:>7}")
    code = [r for r in rows if r["shape"] == "code"][-1]
    tiny = [r for r in rows if r["shape"] == "tiny"][-1]
    print(json.dumps({"bench": "index_memory", "language": args.language, "rows": rows,
                      "rss_per_byte": code["rss_per_byte"], "kept_per_byte": code["kept_per_byte"],
                      "rss_per_byte_tiny": tiny["rss_per_byte"],
                      "rss_per_cost": max(r["rss_per_cost"] for r in rows)}))


if __name__ == "__main__":
    main()
