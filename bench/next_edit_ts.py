"""Next-edit renames on held-out TypeScript: recall and precision against TypeScript's own rename.

    python bench/next_edit_ts.py [--package rxjs@7.8.2] [--tasks 200] [--seed 0] [--npm-dir DIR]
                                 [--code-root DIR]

A TypeScript package that ships its `.ts` sources (default rxjs 7.8.2: `src/`, none of it
read while the analysis was written) and TypeScript 5 are installed with npm into a temporary
folder at bench time (nothing is shipped; `--npm-dir` reuses a folder). The oracle is
TypeScript's language service: for each local binding of a function (a parameter, a rest
parameter, a `const`/`let` declaration, a `for (const x of ...)` binding, an array pattern's
element) `findRenameLocations` with prefix and suffix text (a shorthand property `{ x }`
becomes `{ x: y }`), kept when every location is in the same file. A task renames the
binding (the name + `Zq`) and runs the server's pipeline on it (`edit_analysis.analyze`, the
suggestions, `edit_window.keep` with the binding's line kept, as the server does); a
suggestion is right when it replaces exactly a true location's span with its text.
Reports precision, recall (Wilson 95%), per kind of site (shorthand property, other), the
tasks the analysis did not see as renames; then one JSON line. `--code-root` measures another
checkout's analysis (e.g. main's) with the same tasks.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

ORACLE = r"""
const ts = require(process.argv[2]);
const fs = require("fs");
const files = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const opts = { target: ts.ScriptTarget.ES2020, module: ts.ModuleKind.CommonJS, strict: true, skipLibCheck: true };
const host = {
  getScriptFileNames: () => files, getScriptVersion: () => "1",
  getScriptSnapshot: (f) => fs.existsSync(f) ? ts.ScriptSnapshot.fromString(fs.readFileSync(f, "utf8")) : undefined,
  getCurrentDirectory: () => process.cwd(), getCompilationSettings: () => opts,
  getDefaultLibFileName: (o) => ts.getDefaultLibFilePath(o),
  fileExists: ts.sys.fileExists, readFile: ts.sys.readFile, readDirectory: ts.sys.readDirectory,
};
const service = ts.createLanguageService(host, ts.createDocumentRegistry());
const out = [];
function inFunction(n) {
  for (let p = n.parent; p; p = p.parent) if (ts.isFunctionLike(p)) return true;
  return false;
}
for (const file of files) {
  const sf = service.getProgram().getSourceFile(file);
  const visit = (n) => {
    let id;
    if (ts.isParameter(n) && ts.isIdentifier(n.name)) id = n.name;
    else if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && inFunction(n)) id = n.name;
    else if (ts.isBindingElement(n) && ts.isIdentifier(n.name) && ts.isArrayBindingPattern(n.parent)) id = n.name;
    if (id && id.text !== "this") {
      const at = id.getStart(sf);
      const locs = service.findRenameLocations(file, at, false, false, { providePrefixAndSuffixTextForRename: true });
      if (locs && locs.length && locs.every((l) => l.fileName === file)) {
        const kind = ts.isParameter(n) ? (n.dotDotDotToken ? "rest" : "param")
          : ts.isBindingElement(n) ? "array_pattern"
          : (n.parent && n.parent.parent && ts.isForOfStatement(n.parent.parent)) ? "for_of" : "declaration";
        out.push({ file, name: id.text, at, kind, locs: locs.map((l) => ({ start: l.textSpan.start,
          length: l.textSpan.length, prefix: l.prefixText || "", suffix: l.suffixText || "" })) });
      }
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
}
fs.writeFileSync(process.argv[4], JSON.stringify(out));
"""


def wilson(k: int, n: int) -> list[float]:
    if n == 0:
        return [0.0, 1.0]
    z, p = 1.96, k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 3), round(min(1.0, c + h), 3)]


def install(package: str, where: Path) -> Path:
    """npm installs TypeScript 5 and `package` into `where`; the package's folder."""
    name = package.rsplit("@", 1)[0] if package.count("@") > (1 if package.startswith("@") else 0) else package
    if not (where / "node_modules" / name).is_dir() or not (where / "node_modules/typescript").is_dir():
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", "--prefix", str(where),
                        "typescript@5", package], check=True, capture_output=True, timeout=600)
    return where / "node_modules" / name


def utf16_to_index(text: str) -> list[int] | None:
    """The code-point index of each UTF-16 offset, None when they are the same (no astral char)."""
    if all(ord(c) < 0x10000 for c in text):
        return None
    out: list[int] = []
    for i, c in enumerate(text):
        out += [i] * (2 if ord(c) >= 0x10000 else 1)
    out.append(len(text))
    return out


def run_tasks(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    from llada_lsp.nextedit.edit_analysis import analyze
    from llada_lsp.nextedit.edit_window import from_analysis, keep
    from llada_lsp.text.positions import LineIndex
    from llada_lsp.text.syntax import count_errors, parser_for

    parser = parser_for("typescript")
    assert parser is not None
    texts: dict[str, str] = {}
    sugs = right = located = truths = found = 0
    per_kind: dict[str, list[int]] = {}  # site kind -> [true sites, found]
    not_rename = 0
    for task in tasks:
        text = texts.setdefault(task["file"], Path(task["file"]).read_text())
        m = utf16_to_index(text)

        def ix(u: int, m: list[int] | None = m) -> int:
            return m[u] if m is not None else u

        at, name = ix(task["at"]), task["name"]
        new_name = name + "Zq"
        new = text[:at] + new_name + text[at + len(name):]
        shift = len(new_name) - len(name)
        index = LineIndex.of(new)
        line = index.line_of(at)
        truth: dict[tuple[int, int], tuple[str, str]] = {}
        for loc in task["locs"]:
            a, b = ix(loc["start"]), ix(loc["start"] + loc["length"])
            if a == at:
                continue
            a, b = (a + shift, b + shift) if a > at else (a, b)
            if index.line_of(a) == line:
                continue  # the edited line: the server never suggests there
            kind = "shorthand" if loc["prefix"] or loc["suffix"] else "other"
            truth[(a, b)] = (loc["prefix"] + new_name + loc["suffix"], kind)
        tree_old, tree_new = parser.parse(text.encode()), parser.parse(new.encode())
        an = analyze("typescript", text, new, tree_old, tree_new)
        if an.kind != "rename":
            not_rename += 1
        got = [s for site in an.sites if (s := from_analysis(site)) is not None]
        got = keep("typescript", new, index, got, (line, line), count_errors(tree_new.root_node), tree_new)
        hit = set()
        for s in got:
            sugs += 1
            want = truth.get((s.start, s.end))
            if want is not None:
                located += 1
                if want[0] == s.text:
                    right += 1
                    hit.add((s.start, s.end))
        for span, (_text, kind) in truth.items():
            per_kind.setdefault(kind, [0, 0])[0] += 1
            per_kind[kind][1] += span in hit
        truths += len(truth)
        found += len(hit)
    return {"tasks": len(tasks), "not_rename": not_rename, "suggestions": sugs, "located": located, "right": right,
            "true_sites": truths, "found": found,
            "precision": round(right / sugs, 4) if sugs else 1.0, "precision_ci": wilson(right, sugs),
            "recall": round(found / truths, 4) if truths else 0.0, "recall_ci": wilson(found, truths),
            "per_kind": {k: {"sites": n, "recall": round(f / n, 4) if n else 0.0} for k, (n, f) in per_kind.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", default="rxjs@7.8.2")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--npm-dir", default="")
    ap.add_argument("--code-root", default="", help="measure this checkout's llada_lsp (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, args.code_root or str(ROOT))
    where = Path(args.npm_dir or tempfile.mkdtemp(prefix="llada-ts-bench-"))
    pkg = install(args.package, where)
    files = sorted(str(p) for p in pkg.rglob("*.ts") if not p.name.endswith(".d.ts") and "node_modules" not in
                   p.relative_to(pkg).parts and ".test." not in p.name and ".spec." not in p.name)
    listing, found = where / "files.json", where / f"renames-{args.package.replace('/', '_')}.json"
    if not found.exists():
        listing.write_text(json.dumps(files))
        (where / "oracle.js").write_text(ORACLE)
        subprocess.run(["node", str(where / "oracle.js"), str(where / "node_modules/typescript"), str(listing),
                        str(found)], check=True, timeout=1800, cwd=where)
    every = json.loads(found.read_text())
    rng = random.Random(args.seed)
    rng.shuffle(every)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for t in every:
        by_kind.setdefault(t["kind"], []).append(t)
    # each binding kind in turn, so the rarer ones (rest parameters, for-of) are in the sample
    tasks: list[dict[str, Any]] = []
    while len(tasks) < min(args.tasks, len(every)):
        for k in sorted(by_kind):
            if by_kind[k] and len(tasks) < args.tasks:
                tasks.append(by_kind[k].pop())
    res = run_tasks(tasks)
    counts: dict[str, int] = {}
    for t in tasks:
        counts[t["kind"]] = counts.get(t["kind"], 0) + 1
    res.update({"bench": "next_edit_ts", "package": args.package, "files": len(files), "bindings": len(every),
                "binding_kinds": counts, "code_root": args.code_root or str(ROOT), "seed": args.seed})
    print(f"{args.package}: {len(files)} files, {len(every)} local bindings, {res['tasks']} renamed "
          f"({', '.join(f'{k} {n}' for k, n in sorted(counts.items()))})")
    print(f"precision {res['precision']} {res['precision_ci']}  recall {res['recall']} {res['recall_ci']}  "
          f"({res['right']}/{res['suggestions']} suggestions right, {res['found']}/{res['true_sites']} sites found; "
          f"{res['not_rename']} tasks not seen as a rename)")
    for k, r in sorted(res["per_kind"].items()):
        print(f"  {k:10} sites {r['sites']:5}  recall {r['recall']}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
