"""How far can decoding take exact match on these weights? The shown answer against a
reranker's ceiling, the model's own likelihood as the reranker, and greedy next-token decoding.

    python bench/ceiling.py [--model DIR] [--per-kind 120] [--kinds single_line] [--alternatives 4]

The embedded models also train a next-token loss on the same suffix-first layout (the clean
stream), so one causal forward scores a finished candidate exactly: the sum of the
log-probabilities of its tokens and of the end-of-middle after them. Per task, `quality` with
`--alternatives` candidates (engine.decoding.alternatives), then these arms over the same candidates:
- shown: what the language server shows (the first candidate that adds no parse error);
- any candidate: a task counts when one of the candidates is exact (no reranker beats it);
- likelihood sum / mean: the candidate the model's causal likelihood ranks first (summed, or
  per token);
- greedy next-token: the same weights decoding one token a forward left to right, token
  healing's allowed set on the first, stopped by the plan's stop rule (not a diffusion
  decode: it says whether the weights know more than the diffusion decode finds).
Prints a table and ends with one JSON line. Embedded-family models only (LLaDA's logits do not
predict the next token).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ab import chosen, engine_and_tasks, task_args  # noqa: E402
from bench.tasks import Task, edit_similarity, exact_match  # noqa: E402
from engine.api import CompletionRequest  # noqa: E402
from engine.decoding.stops import cut_text  # noqa: E402

ARMS = ("shown", "any candidate", "likelihood sum", "likelihood mean", "greedy next-token")


def causal_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """[T - 1, V] log-probabilities of each next token of `ids`, causal attention, no cache."""
    x = torch.tensor([ids])
    n = x.shape[1]
    mask = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    return model(x, torch.arange(n)[None], mask)[0, :-1].log_softmax(-1)


def scores(eng, task: Task, cands: list[str]) -> list[tuple[float, float]]:  # noqa: ANN001 - TextEngine
    """(sum, mean) log-likelihood of each candidate and the end-of-middle after it."""
    prompt, _suffix, partial, _allowed = eng.layout(task.prefix, task.suffix)
    out = []
    for c in cands:
        mid = eng.tok.encode(partial + c).ids if partial + c else []
        ids = [*prompt, *mid, eng.sp.end_of_middle]
        lp = causal_logprobs(eng.model, ids)[len(prompt) - 1:]
        tok = lp.gather(1, torch.tensor(ids[len(prompt):])[:, None])[:, 0]
        out.append((float(tok.sum()), float(tok.mean())))
    return out


def greedy(eng, task: Task, max_tokens: int = 48) -> str:  # noqa: ANN001 - TextEngine
    """Greedy next-token decoding of the task's middle, cut by its plan's stop rule."""
    prompt, _suffix, partial, allowed = eng.layout(task.prefix, task.suffix)
    ids, new = list(prompt), []
    for k in range(max_tokens):
        x = torch.tensor([ids])
        n = x.shape[1]
        logits = eng.model(x, torch.arange(n)[None], torch.ones(n, n, dtype=torch.bool).tril()[None, None],
                           logits_at=torch.tensor([[n - 1]]))[0, 0]
        if k == 0 and allowed is not None:
            logits = logits.masked_fill(~allowed, float("-inf"))
        t = int(logits.argmax())
        if t == eng.sp.end_of_middle:
            break
        ids.append(t)
        new.append(t)
        text = eng.tok.decode(new)
        if cut_text(text[len(partial):] if text.startswith(partial) else text, task.plan)[1]:
            break
    text = eng.tok.decode(new)
    return cut_text(text[len(partial):] if text.startswith(partial) else text, task.plan)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    task_args(ap, 120)
    ap.add_argument("--alternatives", type=int, default=4)
    ap.set_defaults(kinds="single_line")
    args = ap.parse_args()
    eng, kinds, tasks = engine_and_tasks(args)
    if eng.loaded.family != "embedded":
        sys.exit(f"{eng.model_dir}: a {eng.loaded.family} model; the causal arms need the embedded family")
    t0 = time.perf_counter()
    rows = []
    with torch.inference_mode():
        for kind in kinds:
            ks = [t for t in tasks if t.kind == kind]
            em = dict.fromkeys(ARMS, 0.0)
            es = dict.fromkeys(ARMS, 0.0)
            for t in ks:
                eng.prompt_cache.clear()
                plan = replace(t.plan, preset="quality", alternatives=args.alternatives)
                done = list(eng.complete(CompletionRequest("ceiling", "ceiling", t.prefix, t.suffix, plan)))[-1]
                cands = [done.text, *done.alternatives]
                sc = scores(eng, t, cands)
                picks = {"shown": chosen(t, done),
                         "likelihood sum": cands[max(range(len(cands)), key=lambda i: sc[i][0])],
                         "likelihood mean": cands[max(range(len(cands)), key=lambda i: sc[i][1])],
                         "greedy next-token": greedy(eng, t)}
                picks["any candidate"] = next((c for c in cands if exact_match(c, t.middle)), picks["shown"])
                for arm, text in picks.items():
                    em[arm] += exact_match(text, t.middle)
                    es[arm] += edit_similarity(text, t.middle)
            n = max(1, len(ks))
            rows += [{"kind": kind, "arm": a, "n": len(ks), "exact_match": em[a] / n, "edit_sim": es[a] / n}
                     for a in ARMS]
    print(f"model {eng.model_dir.name}, {len(tasks)} tasks, {args.alternatives} candidates, "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"{'kind':<12} {'arm':<18} {'EM':>6} {'ES':>6}")
    for r in rows:
        print(f"{r['kind']:<12} {r['arm']:<18} {r['exact_match']:>6.3f} {r['edit_sim']:>6.3f}")
    print(json.dumps({"bench": "ceiling", "model": eng.model_dir.name, "tasks": len(tasks),
                      "alternatives": args.alternatives,
                      "rows": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]}))


if __name__ == "__main__":
    main()
