"""Train the trunk and its MTP head together on the standard library's source, and save the folder.

    python -m tools.stdlib_mtp.train OUT [--tokens N] [--seed S] [--work DIR] [--log FILE]

Seeded end to end (tokenizer, initial weights, batch order); torch runs on `--threads` intra-op
threads. The budget is a number of training tokens, not a time: the machine is shared, so the
log reports CPU seconds (this process, all its threads) and tokens per CPU-second beside the wall
clock and the load average, and `--work` holds a resumable state every `--save-every` steps.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from . import corpus as corpus_mod
from . import tokenizer as tokenizer_mod

DEFAULTS = {
    "tokens": 3_000_000, "seed": 0, "seq_len": 512, "batch": 8, "lr": 3e-3, "min_lr_ratio": 0.1,
    "warmup": 50, "weight_decay": 0.1, "head_weight": 0.5, "chain": 1, "chain_rows": 2, "chain_weight": 0.25,
    "vocab_size": 4096, "threads": 1, "eval_windows": 32,
}


def log_line(log, **fields) -> None:
    line = json.dumps(fields, sort_keys=False)
    print(line, flush=True)
    if log is not None:
        log.write(line + "\n")
        log.flush()


def token_stream(tok, texts: list[str]) -> np.ndarray:
    """The files' tokens, each file followed by <|endoftext|> (id 0)."""
    parts = []
    for encoding in tok.encode_batch(texts):
        parts.append(np.asarray(encoding.ids, dtype=np.int32))
        parts.append(np.zeros(1, dtype=np.int32))
    return np.concatenate(parts)


def windows(stream: np.ndarray, seq_len: int) -> np.ndarray:
    """Non-overlapping windows of seq_len tokens `[N, seq_len]` (the tail that does not fill one is dropped)."""
    n = len(stream) // seq_len
    return stream[: n * seq_len].reshape(n, seq_len)


def batch_order(num_windows: int, steps: int, batch: int, seed: int) -> np.ndarray:
    """Window indices for every step `[steps, batch]`: epochs of seeded permutations, concatenated."""
    rng = np.random.default_rng(seed)
    need = steps * batch
    order = np.concatenate([rng.permutation(num_windows) for _ in range(math.ceil(need / num_windows))])
    return order[:need].reshape(steps, batch)


def learning_rate(step: int, steps: int, cfg: dict) -> float:
    if step < cfg["warmup"]:
        return cfg["lr"] * (step + 1) / cfg["warmup"]
    progress = (step - cfg["warmup"]) / max(1, steps - cfg["warmup"])
    floor = cfg["lr"] * cfg["min_lr_ratio"]
    return floor + (cfg["lr"] - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def evaluate(model, data: np.ndarray, chain: int) -> dict:
    import torch

    model.eval()
    sums = {"loss": 0.0, "head_loss": [0.0] * (1 + chain), "agree": [0.0] * (1 + chain)}
    with torch.no_grad():
        for start in range(0, len(data), 8):
            ids = torch.from_numpy(data[start : start + 8].astype(np.int64))
            main, heads, agree = model.losses(ids, chain)
            weight = len(ids) / len(data)
            sums["loss"] += float(main) * weight
            for d in range(len(heads)):
                sums["head_loss"][d] += float(heads[d]) * weight
                sums["agree"][d] += float(agree[d]) * weight
    model.train()
    return {k: (round(v, 5) if isinstance(v, float) else [round(x, 5) for x in v]) for k, v in sums.items()}


def prepare(out: Path, cfg: dict):
    """Corpus, tokenizer (trained and saved into `out`), token windows of both splits."""
    text = corpus_mod.load()
    started = time.process_time()
    tok = tokenizer_mod.train(text.text("train"), cfg["vocab_size"])
    tokenizer_seconds = time.process_time() - started
    out.mkdir(parents=True, exist_ok=True)
    tokenizer_mod.save(tok, out, 4096)
    train_stream = token_stream(tok, text.text("train"))
    held_stream = token_stream(tok, text.text("held_out"))
    return text, tok, train_stream, held_stream, tokenizer_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    for key, value in DEFAULTS.items():
        parser.add_argument("--" + key.replace("_", "-"), type=type(value), default=value)
    parser.add_argument("--work", type=Path, help="folder for the resumable state (default OUT.work)")
    parser.add_argument("--log", type=Path)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--eval-every", type=int, default=200)
    args = parser.parse_args(argv)
    cfg = {k: getattr(args, k) for k in DEFAULTS}

    import torch

    torch.set_num_threads(cfg["threads"])
    torch.manual_seed(cfg["seed"])
    log = open(args.log, "a") if args.log else None
    wall0, cpu0 = time.time(), time.process_time()
    text, tok, train_stream, held_stream, tokenizer_seconds = prepare(args.out, cfg)
    data = windows(train_stream, cfg["seq_len"] + 1)
    held = windows(held_stream, cfg["seq_len"] + 1)
    tokens_per_step = cfg["batch"] * cfg["seq_len"]
    steps = cfg["tokens"] // tokens_per_step
    order = batch_order(len(data), steps, cfg["batch"], cfg["seed"])
    log_line(log, event="data", train_files=len(text.train), held_out_files=len(text.held_out),
             train_tokens=int(len(train_stream)), held_out_tokens=int(len(held_stream)), steps=steps,
             epochs=round(steps * cfg["batch"] / len(data), 3), tokenizer_cpu_s=round(tokenizer_seconds, 1),
             python=sys.version.split()[0], train_digest=text.digest("train"))

    from .model import TrunkWithHead, text_config
    from . import save as save_mod

    model = TrunkWithHead(text_config(cfg["vocab_size"], eos=0))
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg["lr"], betas=(0.9, 0.95), eps=1e-8)
    work = args.work or args.out.with_name(args.out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    state_file = work / "state.pt"
    start, cpu_spent = 0, 0.0
    if state_file.is_file():
        state = torch.load(state_file, weights_only=False)
        if state["cfg"] == cfg:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start, cpu_spent = state["step"], state["train_cpu_s"]
            torch.set_rng_state(state["torch_rng"])
            log_line(log, event="resume", step=start)
    eval_held = held[: cfg["eval_windows"]]
    model.train()
    segment_cpu, segment_wall, segment_tokens = time.process_time(), time.time(), 0
    for step in range(start, steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, steps, cfg)
        ids = torch.from_numpy(data[order[step]].astype(np.int64))
        main, heads, agree = model.losses(ids, cfg["chain"], cfg["chain_rows"])
        loss = main + cfg["head_weight"] * heads[0] + sum(cfg["chain_weight"] * h for h in heads[1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        segment_tokens += tokens_per_step
        done = step + 1
        if done % 10 == 0 or done == steps:
            cpu, wall = time.process_time() - segment_cpu, time.time() - segment_wall
            cpu_spent += cpu
            log_line(log, event="step", step=done, loss=round(float(main.detach()), 4),
                     head=[round(float(h.detach()), 4) for h in heads], agree=[round(float(a), 3) for a in agree],
                     lr=round(learning_rate(step, steps, cfg), 6), tok_per_cpu_s=round(segment_tokens / cpu, 1),
                     tok_per_s=round(segment_tokens / wall, 1), train_cpu_s=round(cpu_spent, 1),
                     load=round(os.getloadavg()[0], 2))
            segment_cpu, segment_wall, segment_tokens = time.process_time(), time.time(), 0
        if done % args.eval_every == 0 or done == steps:
            log_line(log, event="eval", step=done, **evaluate(model, eval_held, cfg["chain"]))
            segment_cpu, segment_wall = time.process_time(), time.time()  # training throughput only
        if done % args.save_every == 0 and done != steps:
            torch.save({"cfg": cfg, "model": model.state_dict(), "opt": opt.state_dict(), "step": done,
                        "train_cpu_s": cpu_spent, "torch_rng": torch.get_rng_state()}, work / "state.tmp")
            os.replace(work / "state.tmp", state_file)
    with torch.no_grad():  # what is saved: the held-out figures below are the committed checkpoint's
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    final = evaluate(model, held, cfg["chain"])
    log_line(log, event="final", held_out_windows=len(held), **final)
    save_mod.save(model, args.out, tok_config={"eos": 0})
    record = {"recipe": "tools/stdlib_mtp", "config": cfg, "python": sys.version.split()[0],
              "train_files": list(text.train), "held_out_files": list(text.held_out),
              "skipped_files": list(text.skipped), "train_digest": text.digest("train"),
              "held_out_digest": text.digest("held_out"), "train_tokens": int(len(train_stream)),
              "held_out_tokens": int(len(held_stream)), "steps": steps, "tokens_trained": steps * tokens_per_step,
              "train_cpu_s": round(cpu_spent, 1), "wall_s": round(time.time() - wall0, 1),
              "total_cpu_s": round(time.process_time() - cpu0, 1), "held_out": final,
              "torch": torch.__version__}
    (args.out / "training.json").write_text(json.dumps(record, indent=1) + "\n")
    log_line(log, event="saved", out=str(args.out), train_cpu_s=round(cpu_spent, 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
