"""PEFT LoRA speed/memory peer on the CPU (fp32) for SmolLM2-135M-Instruct: the PyTorch side of
scripts/bench.sh, beside the toolkit's `bench train` on the same workload. Leaves out quantized or
bf16 runs, GPUs and data loading beyond one train.jsonl. Follows PEFT's documented LoRA recipe
(LoraConfig + get_peft_model on a transformers causal LM, torch AdamW).

What it measures, in this order (peak RSS is recorded after each phase; ru_maxrss is a
process-lifetime high-water mark, so later phases include earlier ones):
  1. load the fp32 HF model (setup.sh makes it: the toolkit's GGUF, dequantized by convert_gguf.py)
  2. forward-only, no grad, base model: batch x seq tokens per call -> tokens/s
  3. greedy generation, base model, KV cache, --gen-tokens new tokens from a short ChatML
     prompt (EOS ignored so exactly that many are produced) -> new tokens/s
  4. wrap with PEFT LoRA (targets: all 7 linear layers of every block), forward-only again
     (adapter unmerged) and generation again
  5. training: --warmup untimed steps then --steps timed steps of
     forward + backward + AdamW.step + zero_grad on batch x seq tokens -> tokens/s =
     batch*seq / mean(step seconds)

Data: --data DIR/train.jsonl in MLX-LM chat format ({"messages":[...]}); each conversation is
rendered with the tokenizer's chat template and its first --seq token ids are used (all
conversations in the shipped data are > 256 tokens, so there is no padding). Batches cycle
through the file in order. --random-tokens uses torch.Generator(seed 0) ids instead.
Loss is HF's causal-LM loss (labels = input_ids, shifted inside the model: seq-1 targets/row).

Usage (the venv and model come from scripts/peers/setup.sh; --model defaults to $PEER_MODEL, else
$PEERS/smollm2-135m-hf, $PEERS defaulting to ~/.cache/adapter-peers):
  OMP_NUM_THREADS=2 ~/.cache/adapter-peers/venv/bin/python scripts/peers/peft_bench.py \
      --random-tokens --rank 32 --batch 4 --seq 256 --out runs/peft_r32.json
"""
import argparse, json, os, platform, resource, sys, time

import torch


def rss_mb():
    # Linux: ru_maxrss is in KiB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cur_rss_mb():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except Exception:
        return float("nan")


def load_batches(args, tok):
    if args.random_tokens:
        g = torch.Generator().manual_seed(0)
        n = max(args.batch * 4, args.batch)
        ids = torch.randint(0, tok.vocab_size if hasattr(tok, "vocab_size") else 49152,
                            (n, args.seq), generator=g)
        return [ids[i:i + args.batch] for i in range(0, n, args.batch)]
    rows = []
    with open(os.path.join(args.data, "train.jsonl")) as f:
        for line in f:
            msgs = json.loads(line)["messages"]
            ids = tok.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]
            if len(ids) >= args.seq:
                rows.append(ids[: args.seq])
    if len(rows) < args.batch:
        sys.exit(f"need at least {args.batch} conversations with >= {args.seq} tokens")
    t = torch.tensor(rows, dtype=torch.long)
    nb = len(rows) // args.batch
    return [t[i * args.batch:(i + 1) * args.batch] for i in range(nb)]


def bench_forward(model, batch, reps):
    model.eval()
    times = []
    with torch.no_grad():
        model(input_ids=batch)  # warm-up
        for _ in range(reps):
            t0 = time.perf_counter()
            model(input_ids=batch)
            times.append(time.perf_counter() - t0)
    n = batch.numel()
    return {"tokens_per_call": n, "sec_per_call": times,
            "tokens_per_s": n / (sum(times) / len(times))}


def bench_generate(model, tok, n_new, reps):
    model.eval()
    msgs = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                  return_dict=True)["input_ids"]
    kw = dict(max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False, use_cache=True,
              pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        model.generate(ids, **dict(kw, max_new_tokens=8, min_new_tokens=8))  # warm-up
        runs = []
        for _ in range(reps):
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            dt = time.perf_counter() - t0
            new = out.shape[1] - ids.shape[1]
            runs.append({"sec": dt, "new_tokens": int(new)})
    text = tok.decode(out[0, ids.shape[1]:])
    best = min(r["sec"] for r in runs)
    mean = sum(r["sec"] for r in runs) / len(runs)
    return {"prompt_tokens": int(ids.shape[1]), "runs": runs,
            "tokens_per_s_mean": n_new / mean, "tokens_per_s_best": n_new / best,
            "sample_text": text[:300]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    peers = os.environ.get("PEERS") or os.path.expanduser("~/.cache/adapter-peers")
    ap.add_argument("--model", default=os.environ.get("PEER_MODEL") or os.path.join(peers, "smollm2-135m-hf"),
                    help="fp32 Hugging Face folder (default $PEER_MODEL, else $PEERS/smollm2-135m-hf)")
    ap.add_argument("--data", required=False, default=None, help="folder holding train.jsonl ({\"messages\": [...]} per line); omit with --random-tokens")
    ap.add_argument("--random-tokens", action="store_true")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=None, help="default 2*rank (16 for r=8)")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--weight-decay", type=float, default=0.01, help="torch AdamW default")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fwd-reps", type=int, default=5)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--gen-reps", type=int, default=2)
    ap.add_argument("--skip-lora-infer", action="store_true", help="skip forward/generate with the unmerged adapter")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.alpha is None:
        args.alpha = 2.0 * args.rank

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    import transformers, peft
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from peft import LoraConfig, get_peft_model

    res = {"system": "pytorch+peft", "args": vars(args),
           "versions": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "peft": peft.__version__},
           "torch_threads": torch.get_num_threads(),
           "env": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                   "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
           "rss_peak_mb": {}, "rss_now_mb": {}}

    def mark(phase):
        res["rss_peak_mb"][phase] = round(rss_mb(), 1)
        res["rss_now_mb"][phase] = round(cur_rss_mb(), 1)
        print(f"[{phase}] peak RSS {res['rss_peak_mb'][phase]:.0f} MiB, now {res['rss_now_mb'][phase]:.0f} MiB", flush=True)

    mark("start")
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.config.use_cache = True
    mark("model_loaded")
    batches = load_batches(args, tok)
    res["n_batches"] = len(batches)

    res["forward_base"] = bench_forward(model, batches[0], args.fwd_reps)
    print(f"forward (base, no grad): {res['forward_base']['tokens_per_s']:.1f} tok/s", flush=True)
    mark("forward_base")
    res["generate_base"] = bench_generate(model, tok, args.gen_tokens, args.gen_reps)
    print(f"generate (base, greedy, KV cache): {res['generate_base']['tokens_per_s_mean']:.2f} tok/s", flush=True)
    mark("generate_base")

    cfg = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=args.dropout,
                     target_modules=args.targets.split(","), bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(model, cfg)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in model.parameters())
    res["trainable_params"] = n_train
    res["total_params"] = n_all
    print(f"trainable {n_train} / {n_all}", flush=True)
    mark("peft_wrapped")

    if not args.skip_lora_infer:
        res["forward_lora"] = bench_forward(model, batches[0], args.fwd_reps)
        print(f"forward (LoRA unmerged, no grad): {res['forward_lora']['tokens_per_s']:.1f} tok/s", flush=True)
        mark("forward_lora")
        res["generate_lora"] = bench_generate(model, tok, args.gen_tokens, args.gen_reps)
        print(f"generate (LoRA unmerged): {res['generate_lora']['tokens_per_s_mean']:.2f} tok/s", flush=True)
        mark("generate_lora")

    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                            weight_decay=args.weight_decay)
    losses, times = [], []
    total = args.warmup + args.steps
    for i in range(total):
        b = batches[i % len(batches)]
        t0 = time.perf_counter()
        out = model(input_ids=b, labels=b, use_cache=False)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(out.loss.item())
        times.append(dt)
        print(f"step {i+1:3d}/{total} {'warm' if i < args.warmup else 'timed'} loss {losses[-1]:.4f} "
              f"{dt:.3f}s {args.batch*args.seq/dt:.1f} tok/s", flush=True)
    mark("train")
    # loss on batch 0 after training (step 1's loss is the same batch before any update)
    model.eval()
    with torch.no_grad():
        loss_b0_after = model(input_ids=batches[0], labels=batches[0], use_cache=False).loss.item()
    tt = times[args.warmup:]
    mean = sum(tt) / len(tt)
    res["train"] = {"tokens_per_step": args.batch * args.seq, "step_sec": times, "loss": losses,
                    "timed_mean_step_sec": mean, "tokens_per_s": args.batch * args.seq / mean,
                    "tokens_per_s_median_step": args.batch * args.seq / sorted(tt)[len(tt) // 2],
                    "loss_first_step": losses[0], "loss_first_timed_step": losses[args.warmup],
                    "loss_last_step": losses[-1],
                    "loss_batch0_before_training": losses[0], "loss_batch0_after_training": loss_b0_after}
    res["peak_rss_mb"] = round(rss_mb(), 1)
    print(json.dumps({k: res[k] for k in ("peak_rss_mb",)}))
    print(f"TRAIN r={args.rank} alpha={args.alpha}: {res['train']['tokens_per_s']:.1f} tok/s, "
          f"loss {losses[0]:.4f} -> {losses[-1]:.4f} (batch0 after: {loss_b0_after:.4f}), peak RSS {res['peak_rss_mb']:.0f} MiB")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
