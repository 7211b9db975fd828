#!/usr/bin/env python3
"""MLX peer for scripts/bench.sh: LoRA training speed and peak memory of mlx-lm on the CPU.

Same workload as scripts/peers/peft_bench.py --random-tokens: the fp32 Hugging Face copy of
SmolLM2-135M-Instruct (made by scripts/peers/setup.sh), LoRA on all seven projections
of every layer, random tokens, next-token loss on every position, AdamW, batch x seq tokens per
step. Writes {"train": {"tokens_per_s": ...}, "peak_rss_mb": ...} as JSON. A peer benchmark
only: the toolkit itself never runs Python.
"""
import argparse, json, os, resource, sys, time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    peers = os.environ.get("PEERS") or os.path.expanduser("~/.cache/adapter-peers")
    ap.add_argument("--model", default=os.environ.get("PEER_MODEL") or os.path.join(peers, "smollm2-135m-hf"),
                    help="fp32 Hugging Face folder (default $PEER_MODEL, else $PEERS/smollm2-135m-hf)")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--alpha", type=float, default=None, help="default 2*rank, as peft_bench.py")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    import mlx_lm
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.tuner.utils import linear_to_lora_layers

    mx.set_default_device(mx.cpu)
    model, _ = load(args.model)
    model.set_dtype(mx.float32)
    model.freeze()
    keys = [f"self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "o_proj")] + [f"mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")]
    alpha = args.alpha if args.alpha is not None else 2.0 * args.rank
    linear_to_lora_layers(model, len(model.layers), {"rank": args.rank, "scale": alpha / args.rank, "dropout": 0.0, "keys": keys})
    trainable = sum(v.size for _, v in tree_flatten(model.trainable_parameters()))
    print(f"mlx {mx.__version__}, device {mx.default_device()}, trainable {trainable}", file=sys.stderr)

    vocab = model.args.vocab_size
    tokens = mx.random.randint(0, vocab, (args.batch, args.seq + 1), key=mx.random.key(0))
    x, y = tokens[:, :-1], tokens[:, 1:]

    def loss_fn(m, x, y):
        return nn.losses.cross_entropy(m(x).astype(mx.float32), y).mean()

    loss_and_grad = nn.value_and_grad(model, loss_fn)
    opt = optim.AdamW(learning_rate=1e-4, weight_decay=0.01)
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        loss, grads = loss_and_grad(model, x, y)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state, loss)
        elapsed = time.perf_counter() - start
        kind = "warm" if step < args.warmup else "timed"
        print(f"step {step + 1}/{args.warmup + args.steps} {kind} loss {loss.item():.4f} {elapsed:.3f}s "
              f"{args.batch * args.seq / elapsed:.1f} tok/s", file=sys.stderr)
        if step >= args.warmup:
            times.append(elapsed)
    per_step = sum(times) / len(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"peer": f"mlx-lm {mlx_lm.__version__} (mlx {mx.__version__}, CPU)",
              "train": {"tokens_per_s": args.batch * args.seq / per_step, "seconds_per_step": per_step},
              "peak_rss_mb": rss}
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
