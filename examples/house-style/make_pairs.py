"""Preference pairs from a supervised adapter's mistakes, for examples/house-style/preference.sh.

Reads held-out training samples (JSONL conversations, the last turn the reference reply) and
evaluate-adapter's --output for them (one JSON line per generated reply: line, model, output,
exact_match), and writes a pair for every reply that is not the reference:
{"messages": [the sample's turns before its last], "chosen": reference, "rejected": the reply}.
The pairs are split by a seeded shuffle into pairs-train.jsonl and pairs-eval.jsonl (held out:
the reward accuracy is measured on them). Python 3 standard library only; Python makes data here,
the toolkit never runs it.

    python3 make_pairs.py HELDOUT.jsonl REPLIES.jsonl OUT_DIR [--eval-fraction 0.1] [--seed 0]
"""
import argparse
import json
import random
import sys
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("heldout")
    ap.add_argument("replies")
    ap.add_argument("out_dir")
    ap.add_argument("--eval-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    samples = {}
    for number, line in enumerate(Path(a.heldout).read_text().splitlines(), start=1):
        if line.strip():
            samples[number] = json.loads(line)["messages"]
    pairs, right = [], 0
    for line in Path(a.replies).read_text().splitlines():
        r = json.loads(line)
        messages = samples[r["line"]]
        reference = messages[-1]["content"]
        if r["exact_match"] or r["output"].strip() == reference.strip():
            right += 1
            continue
        if not r["output"].strip():
            continue  # an empty reply is not a turn the schema accepts
        pairs.append({"messages": messages[:-1], "chosen": reference, "rejected": r["output"]})
    random.Random(a.seed).shuffle(pairs)
    held = max(1, round(len(pairs) * a.eval_fraction))
    out = Path(a.out_dir)
    for name, part in [("pairs-eval.jsonl", pairs[:held]), ("pairs-train.jsonl", pairs[held:])]:
        (out / name).write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in part))
    print(f"{len(pairs)} pairs from {len(pairs) + right} replies ({right} were right): "
          f"{len(pairs) - held} in pairs-train.jsonl, {held} in pairs-eval.jsonl", file=sys.stderr)


if __name__ == "__main__":
    main()
