"""Train the embedded model: autoregressive warm-up, then block diffusion with T2T noise.

    python -m engine.train.train --out runs/embedded --steps 4000

Both phases keep the next-token loss on the clean (causal) stream; the second adds the
block-diffusion loss on noisy copies of the middle blocks. Deterministic from --seed;
`--resume` continues from `OUT/state.pt` (model, optimizer, data and noise generators).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from engine.model.checkpoint import save_checkpoint
from engine.model.native import ModelConfig, Transformer, preset
from engine.prompt.tokenizer import load_tokenizer, special_tokens_of
from engine.train.bank import TokenBank
from engine.train.bank_sampler import BankSampler
from engine.train.batches import TeacherRows, crossfile_stream, held_batch, next_batch
from engine.train.corpus import load_texts
from engine.train.data import MAX_POSITIONS, Batch, ExampleStream, make_batch
from engine.train.distill import load_rows
from engine.train.echo import Echo, batch_index, echo_batch
from engine.train.parallel import BuildSpec, ParallelStream, pick_transport
from engine.train.speed import StepProfile, candidates, pick


def lr_at(step: int, total: int, peak: float, warmup: int, schedule: str = "cosine", decay_steps: int = 0) -> float:
    """Linear warm-up, then either a cosine to 10% of the peak at `total`, or warmup-stable-decay
    ("wsd"): the peak until `total - decay_steps`, then down to 0 as 1 - sqrt(progress)
    (Hägele et al. 2024). A wsd run keeps its state at the start of the decay, so that a later
    session can go on from the un-annealed weights instead of warming a finished run up again."""
    if step < warmup:
        return peak * (step + 1) / warmup
    if schedule == "wsd":
        start = stable_end(total, decay_steps)
        if step < start:
            return peak
        return peak * (1 - math.sqrt(min(1.0, (step - start + 1) / max(1, decay_steps))))
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def stable_end(total: int, decay_steps: int) -> int:
    """The first step of a wsd run's decay (its stable state is saved just before it)."""
    return max(0, total - decay_steps)


def losses(model: torch.nn.Module, b: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Next-token loss on the clean stream, block-diffusion loss on the noisy copies, and the
    certainty term: the mean entropy of the teacher rows' masked predictions that already
    name the teacher's token (dParallel's certainty forcing; zero without teacher rows)."""
    logits = model(b.idx, b.pos, b.mask)
    T = b.n_clean
    zero = torch.zeros((), device=logits.device)
    ce = F.cross_entropy(logits[:, :T].flatten(0, 1), b.ar_target.flatten(), reduction="none", ignore_index=-100)
    ar = (ce * b.ar_weight.flatten()).sum() / b.ar_weight.sum().clamp_min(1)
    if b.noisy_target.shape[1] == 0:
        return ar, zero, zero
    noisy = logits[:, T:]
    ce2 = F.cross_entropy(noisy.flatten(0, 1), b.noisy_target.flatten(), reduction="none", ignore_index=-100)
    diff = (ce2 * b.noisy_weight.flatten()).sum() / b.noisy_weight.shape[0]
    if b.certain is None:
        return ar, diff, zero
    right = b.certain & (noisy.argmax(-1) == b.noisy_target)
    logp = F.log_softmax(noisy[right].float(), -1)
    cert = -(logp.exp() * logp).sum(-1).sum() / right.sum().clamp_min(1)
    return ar, diff, cert


def save_state(model: Transformer, opt: torch.optim.Optimizer, step: int, tokens: int,
               stream: ExampleStream, noise: torch.Generator, args: argparse.Namespace, stable: bool,
               teacher_pos: int = 0, bank: BankSampler | None = None) -> None:
    """OUT/state.pt (what --resume reads), OUT/latest and OUT/snap-STEP; with `stable`, also the
    un-annealed state a later run goes on from (OUT/state-stable.pt, --resume-from) and OUT/stable."""
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "tokens": tokens,
             "data_rng": stream.rng.getstate(), "noise_rng": noise.get_state(), "args": vars(args),
             "teacher_pos": teacher_pos, **({"bank_rng": bank.gen.get_state()} if bank is not None else {})}
    torch.save(state, args.out / "state.pt")
    tok_file = args.tokenizer / "tokenizer.json"
    save_checkpoint(model, args.out / "latest", tok_file)
    save_checkpoint(model, args.out / f"snap-{step:06d}", tok_file)
    if stable:
        torch.save(state, args.out / "state-stable.pt")
        save_checkpoint(model, args.out / "stable", tok_file)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokenizer", type=Path, required=True)
    ap.add_argument("--preset", default="tiny-code")
    ap.add_argument("--layers", type=int, help="layers instead of the preset's; with --init-from a "
                    "shallower checkpoint, its layers grow into these (engine/train/grow.py)")
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--ar-steps", type=int, default=1200, help="steps of autoregressive warm-up")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-every", type=int, default=250)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the forward "
                    "(fp32 weights and optimizer; ~1.3x faster on CPUs with AMX; refused on CPUs without)")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/state.pt (model, optimizer, data)")
    ap.add_argument("--init-from", type=Path, help="start from a checkpoint directory's weights "
                    "(e.g. the committed engine/checkpoints/tiny-code), with a fresh optimizer")
    ap.add_argument("--resume-from", type=Path, help="continue from another run's state file (e.g. "
                    "runs/prev/state-stable.pt: a wsd run before its decay), the step count going on")
    ap.add_argument("--schedule", choices=("cosine", "wsd"), default="cosine",
                    help="cosine to 10%% of --lr, or warmup-stable-decay (see lr_at)")
    ap.add_argument("--decay-steps", type=int, default=0, help="wsd: the steps of the final decay")
    ap.add_argument("--time-budget-s", type=float, help="wsd sized by wall clock: the stable phase runs "
                    "until (1 - --decay-frac) of this many seconds have passed, then the decay takes the "
                    "steps the measured rate fits in the rest (--steps stays the cap)")
    ap.add_argument("--decay-frac", type=float, default=0.2, help="with --time-budget-s: the decay's share")
    ap.add_argument("--data-seed", type=int, help="seed of the example stream (default: --seed)")
    ap.add_argument("--distill", type=Path, help="teacher rows (python -m engine.train.distill): mix them "
                    "into every batch, with the certainty term on their masked tokens")
    ap.add_argument("--distill-frac", type=float, default=0.5, help="with --distill: the share of each batch")
    ap.add_argument("--distill-suffix", type=float, default=0.5, help="with --distill: the share of teacher "
                    "blocks masked as a left-to-right decode leaves them (a known start, the rest masked) "
                    "instead of at random")
    ap.add_argument("--certainty", type=float, default=1.0, help="with --distill: the certainty term's weight")
    ap.add_argument("--crossfile", type=float, default=0.0, help="the share of each batch drawn from "
                    "engine.train.crossfile_examples (training files of multi-file packages, with workspace context "
                    "from the package's other training files, laid out by the engine's prompt builder)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    ap.add_argument("--data-workers", type=int, default=0, help="processes preparing examples (0: the "
                    "trainer's own; a GPU run needs several: see engine/train/parallel.py)")
    ap.add_argument("--transport", choices=("auto", "tensors", "arrays"), default="auto",
                    help="how built batches cross from the example workers: tensors (shared memory by "
                    "file descriptor), plain arrays (copied), or auto: time both at the start")
    ap.add_argument("--bank", type=Path, help="cut every batch on the training device from this token "
                    "bank (python -m engine.train.bank; for a GPU that the host's cores cannot feed)")
    ap.add_argument("--echo", default="1", help="data echoing (engine/train/echo.py): N uses of each "
                    "diffusion batch under fresh noise, or auto[:N] (again only while the next batch "
                    "is not ready, N at most, default 4)")
    ap.add_argument("--gqa", choices=("auto", "native", "expand"), default="auto",
                    help="grouped-query attention under the training mask (engine/train/speed.py); "
                    "auto: time both on CUDA, native on the CPU")
    ap.add_argument("--compile", choices=("auto", "on", "off"), default="auto",
                    help="torch.compile the training forward; auto: time it against eager on CUDA, off on the CPU")
    ap.add_argument("--profile-steps", type=int, default=0, help="profile the first N steps and print "
                    "the time by operator (device time on CUDA)")
    args = ap.parse_args()
    try:
        echo = Echo.parse(args.echo)
    except ValueError as e:
        ap.error(f"--echo: {e}")
    if args.bank is not None and (args.distill is not None or args.data_workers or echo.mode != "off"):
        ap.error("--bank does not go with --distill, --data-workers or --echo")
    if args.crossfile and (args.bank is not None or args.data_workers):
        ap.error("--crossfile goes with this process's own example stream (no --bank, no --data-workers)")
    if echo.mode != "off" and args.distill is not None:
        ap.error("--echo does not go with --distill (the teacher rows' targets follow their noise)")
    if args.time_budget_s is not None:
        if args.schedule != "wsd" or args.decay_steps or not 0 < args.decay_frac < 1:
            ap.error("--time-budget-s goes with --schedule wsd, 0 < --decay-frac < 1 and no --decay-steps")
    elif args.schedule == "wsd" and not 0 < args.decay_steps <= args.steps:
        ap.error("--schedule wsd needs 0 < --decay-steps <= --steps (or --time-budget-s)")
    from engine.model.loader import cpu_has_bf16_matmul

    dev = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                       "cpu" if args.device == "auto" else args.device)
    if args.bf16 and dev.type == "cpu" and not cpu_has_bf16_matmul():
        ap.error("--bf16 needs a CPU that multiplies bfloat16 natively (AMX); on this one it is "
                 "~20x slower than float32 (measured: 55 s a step against 2-3 s). Drop --bf16.")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok = load_tokenizer(args.tokenizer)
    sp = special_tokens_of(tok)
    cfg: ModelConfig = preset(args.preset, vocab_size=tok.get_vocab_size(), special=sp)
    if args.layers is not None:
        cfg = dataclasses.replace(cfg, n_layer=args.layers)
    if cfg.max_seq_len < MAX_POSITIONS:  # the rotary tables must cover every example
        cfg = dataclasses.replace(cfg, max_seq_len=MAX_POSITIONS)
    model = Transformer(cfg)
    model.init_weights(args.seed)
    if args.init_from is not None:
        from engine.model.checkpoint import load_checkpoint

        base = load_checkpoint(args.init_from)
        state = base.state_dict()
        if base.config.n_layer != cfg.n_layer:
            from engine.train.grow import grown_state

            state = grown_state(state, base.config.n_layer, cfg.n_layer)
        model.load_state_dict(state)
        print(f"initialised from {args.init_from} ({base.config.n_layer} -> {cfg.n_layer} layers)")
    model.to(dev)
    # fused on CUDA: one kernel for every parameter's update instead of a few per group
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=dev.type == "cuda")
    data_seed = args.seed if args.data_seed is None else args.data_seed
    bank: BankSampler | None = None
    if args.bank is not None:  # the files come as tokens, the held-out rows with them
        tb = TokenBank.load(args.bank)
        bank = BankSampler(tb, sp, cfg.block_size, cfg.vocab_size, dev, data_seed)
        texts: list[str] = []
        weights: list[float] = []
        held_texts: list[str] = []
        held_rows = tb.held
        print(f"token bank {args.bank}: {tb.n_files} files, {len(tb.ids) / 1e6:.2f}M tokens")
    else:
        texts, weights, held_texts = load_texts()
        held_stream = ExampleStream(held_texts, [1.0] * len(held_texts), tok, sp, cfg.block_size, seed=1234)
        held_rows = [held_stream.next() for _ in range(32)]
    stream = ExampleStream(texts, weights, tok, sp, cfg.block_size, seed=data_seed)
    noise = torch.Generator().manual_seed(args.seed + 1)
    teacher = TeacherRows(load_rows(args.distill), data_seed) if args.distill is not None else None
    cross = crossfile_stream(args.tokenizer, cfg.block_size, data_seed) if args.crossfile > 0 else None
    held_noise_seed = 4321
    args.out.mkdir(parents=True, exist_ok=True)
    step, tokens = 0, 0
    state_path = args.out / "state.pt"
    resume_path = args.resume_from if args.resume_from is not None else state_path if args.resume else None
    if resume_path is not None and args.resume_from is not None and not resume_path.exists():
        ap.error(f"--resume-from: no such state file {resume_path}")
    if resume_path is not None and resume_path.exists():
        st = torch.load(resume_path, weights_only=False, map_location=dev)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, tokens = st["step"], st["tokens"]
        stream.rng.setstate(st["data_rng"])
        noise.set_state(st["noise_rng"])
        if bank is not None and "bank_rng" in st:
            bank.gen.set_state(st["bank_rng"].cpu())
        if teacher is not None and "teacher_pos" in st:
            teacher.pos = st["teacher_pos"]
        print(f"resumed at step {step}")
    t_budget = time.time()  # --time-budget-s counts from here: the step's timing (and compiling) is part of the run
    runner: torch.nn.Module = model  # what the training step calls (engine/train/speed.py)
    modes, comps = candidates(args.gqa, args.compile, dev)
    if len(modes) > 1 or comps != [False]:
        probe_rows = [held_rows[i % len(held_rows)] for i in range(args.batch)]
        probe = held_batch(probe_rows, sp, cfg, held_noise_seed, dev)
        choice = pick(model, probe, lambda m, b: torch.stack(losses(m, b)).sum(), dev, args.bf16, modes, comps)
        runner = choice.runner
        print(choice.describe())
    else:
        model.set_gqa(modes[0])
    build = BuildSpec(cfg.vocab_size, args.ar_steps) if teacher is None else None  # teacher rows mix in here
    if build is not None and args.data_workers > 0:
        wire = args.transport == "arrays"
        if args.transport == "auto":
            probe_stream = ExampleStream(texts, weights, tok, sp, cfg.block_size, seed=data_seed + 1)
            sample = make_batch([probe_stream.next() for _ in range(args.batch)], sp, cfg.vocab_size,
                                cfg.block_size, torch.Generator().manual_seed(0), True, with_mask=False)
            wire, ms = pick_transport(sample)
            print(f"batch transport: {'arrays' if wire else 'tensors'} (ms a batch: {ms})")
        build = dataclasses.replace(build, wire=wire)
    par = ParallelStream(texts, weights, tok, sp, cfg.block_size, data_seed, args.batch,
                         args.data_workers, batch_index(step, args.ar_steps, echo), build) \
        if args.data_workers > 0 else None
    echo_noise = torch.Generator(device=dev).manual_seed(args.seed + 2 + step)  # resumes re-seed from the step
    log = (args.out / "log.jsonl").open("a")
    n_params = sum(p.numel() for p in model.parameters())
    print(f"params {n_params / 1e6:.2f}M, train texts {len(texts)}, held-out texts {len(held_texts)}")
    t0, data_s = time.time(), 0.0
    total, decay, first = args.steps, args.decay_steps, step
    bar = tqdm(total=total, initial=step, desc="train")
    profile = StepProfile(args.profile_steps, dev)
    while step < total:
        if args.time_budget_s is not None and not decay \
                and time.time() - t_budget >= (1 - args.decay_frac) * args.time_budget_s:
            rate = (step - first) / max(1e-9, time.time() - t0)
            decay = max(1, round(rate * args.decay_frac * args.time_budget_s))
            total = min(args.steps, step + decay)
            decay = total - step
            bar.total = total
            print(f"\ndecay from step {step} to {total} ({rate:.3f} steps/s)")
            save_state(model, opt, step, tokens, stream, noise, args, stable=True,
                       teacher_pos=teacher.pos if teacher is not None else 0, bank=bank)
        model.train()
        diffusion = step >= args.ar_steps
        t_data = time.time()
        b, fresh = echo.next(functools.partial(next_batch, par, stream, teacher, noise, args, cfg, diffusion, dev, bank, cross),
                             lambda: par is None or par.ready(),
                             lambda held: echo_batch(held, echo_noise, sp.mask, cfg.vocab_size, cfg.block_size))
        data_s += time.time() - t_data
        for g in opt.param_groups:
            g["lr"] = lr_at(step, total, args.lr, args.warmup, args.schedule, decay)  # wsd, decay 0: the peak
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=args.bf16):
            ar, diff, cert = losses(runner, b)
        loss = ar + diff + args.certainty * cert
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if (table := profile.after_step()) is not None:
            print(f"\nprofile of steps {first + 1}-{step} (per operator, all steps together):\n{table}")
        tokens += int(b.ar_weight.gt(0).sum())
        bar.update(1)
        bar.set_postfix(ar=f"{ar.item():.3f}", diff=f"{diff.item():.3f}", tok=f"{tokens / 1e6:.2f}M")
        rec = {"step": step, "tokens": tokens, "ar": round(ar.item(), 4), "diff": round(diff.item(), 4),
               **({"cert": round(cert.item(), 4)} if teacher is not None else {}),
               "lr": opt.param_groups[0]["lr"], "elapsed_s": round(time.time() - t0, 1),
               "data_s": round(data_s, 1),  # of elapsed_s, waiting for (and moving) batches
               **({"echoed": echo.echoed} if echo.mode != "off" else {})}
        if step % args.eval_every == 0 or step == total:
            model.eval()
            with torch.no_grad():
                hb = held_batch(held_rows, sp, cfg, held_noise_seed, dev)
                har, hdiff, _ = losses(model, hb)
            rec |= {"held_ar": round(har.item(), 4), "held_diff": round(hdiff.item(), 4)}
        log.write(json.dumps(rec) + "\n")
        log.flush()
        at_stable_end = args.time_budget_s is None and args.schedule == "wsd" \
            and step == stable_end(total, decay)
        if step % args.save_every == 0 or step == total or at_stable_end:
            save_state(model, opt, step, tokens, stream, noise, args, stable=at_stable_end,
                       teacher_pos=teacher.pos if teacher is not None else 0, bank=bank)
            save_checkpoint(model, args.out / "latest", args.tokenizer / "tokenizer.json")
            save_checkpoint(model, args.out / f"snap-{step:06d}", args.tokenizer / "tokenizer.json")
    bar.close()
    if (table := profile.close()) is not None:
        print(f"\nprofile of steps {first + 1}-{step} (per operator, all steps together):\n{table}")
    if par is not None:
        par.close()


if __name__ == "__main__":
    random.seed(0)
    main()
