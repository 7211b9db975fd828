#!/usr/bin/env python3
"""Generates the house-style example: train.jsonl and eval.jsonl.

The user pastes a casual status note (varied wording, facts in any order); the assistant
replies in the team's fixed house style, which the base model does not know:

    TL;DR: <the headline as one sentence>
    - Owner: <name>
    - Deadline: <weekday>
    - Budget: $<amount>
    - Blocker: <what>

The bullets always come in that order and only for the facts the note gives, so the reply is
fully determined by the note and exact match is meaningful. Held out: eval notes use projects and
people training never mentions, and no eval note appears in training. Deterministic (seeded);
Python 3 standard library only.
"""
import argparse
import json
import os
import random

SYSTEM = "Rewrite status notes in the house style."
TRAIN_PROJECTS = ["Atlas", "Beacon", "Comet", "Delta", "Ember", "Falcon", "Glacier", "Harbor", "Iris", "Juniper",
                  "Kestrel", "Lumen", "Meridian", "Nova", "Orchid"]
EVAL_PROJECTS = ["Pioneer", "Quartz", "Raven", "Summit", "Tundra", "Vortex"]
TRAIN_PEOPLE = ["Ana", "Ben", "Chloe", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Lena", "Marco",
                "Nadia", "Omar", "Priya", "Rosa", "Sven", "Tara"]
EVAL_PEOPLE = ["Aisha", "Bruno", "Carla", "Emma", "Felix", "Hugo", "Kira", "Leo"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
BLOCKERS = ["the legal review", "a flaky test suite", "missing API keys", "the vendor contract", "a database migration",
            "the security audit", "hiring", "the design sign-off"]
# headline kinds: (canonical sentence, casual phrasings)
HEADLINES = [
    ("The {p} launch moved to {d}.", ["the {p} launch moved to {d}", "{p} launch is now {d}", "we pushed the {p} launch to {d}",
                                      "{p} is launching {d} now (moved)"]),
    ("The {p} beta is live.", ["{p} beta is live", "the {p} beta went live", "we shipped the {p} beta", "{p} beta is out!"]),
    ("The {p} project is on hold.", ["{p} is on hold", "we paused {p}", "the {p} project is paused for now", "{p} on hold"]),
    ("The {p} migration is done.", ["the {p} migration is done", "{p} migration finished", "we finished migrating {p}",
                                    "{p} migration: complete"]),
    ("The {p} demo went well.", ["the {p} demo went well", "{p} demo went great", "demo of {p} went well"]),
]
OPENERS = ["", "", "hey all, ", "Quick update: ", "fyi ", "Hi team - ", "status: ", "update on things: "]
JOINERS = [". ", ". Also ", ", and ", ". btw ", "; "]


def fact_phrase(rng, kind, value):
    if kind == "Owner":
        return rng.choice([f"{value} owns it", f"{value} is the owner", f"owner is {value}", f"{value} is driving this"])
    if kind == "Deadline":
        return rng.choice([f"due {value}", f"deadline is {value}", f"needs to be done by {value}", f"we need it by {value}"])
    if kind == "Budget":
        return rng.choice([f"budget is {value}", f"we have {value} to spend", f"{value} budget", f"budget: {value}"])
    return rng.choice([f"blocked on {value}", f"waiting on {value}", f"the blocker is {value}", f"{value} is blocking us"])


def make(rng, projects, people):
    p = rng.choice(projects)
    d = rng.choice(DAYS)
    canonical, casual = rng.choice(HEADLINES)
    headline = canonical.format(p=p, d=d)
    facts = {}
    kinds = ["Owner", "Deadline", "Budget", "Blocker"]
    for k in rng.sample(kinds, rng.choice([1, 2, 2, 3, 3, 4])):
        facts[k] = {"Owner": lambda: rng.choice(people), "Deadline": lambda: rng.choice(DAYS),
                    "Budget": lambda: "$" + rng.choice(["2k", "5k", "10k", "12k", "500", "1,200", "40k"]),
                    "Blocker": lambda: rng.choice(BLOCKERS)}[k]()
    order = list(facts)
    rng.shuffle(order)
    parts = [rng.choice(casual).format(p=p, d=d)] + [fact_phrase(rng, k, facts[k]) for k in order]
    text = parts[0]
    for part in parts[1:]:
        text += rng.choice(JOINERS) + part
    text = rng.choice(OPENERS) + text + rng.choice(["", ".", "!", " thx"])
    if rng.random() < 0.15:
        text = text.lower()
    reply = "TL;DR: " + headline + "".join(f"\n- {k}: {facts[k]}" for k in kinds if k in facts)
    return text, reply


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=800)
    ap.add_argument("--eval", type=int, default=150)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    seen = set()

    def lines(rng, n, projects, people):
        out = []
        while len(out) < n:
            text, reply = make(rng, projects, people)
            if text.lower() in seen:
                continue
            seen.add(text.lower())
            out.append(json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                                {"role": "user", "content": text},
                                                {"role": "assistant", "content": reply}]}, ensure_ascii=False))
        return out

    train = lines(random.Random(args.seed), args.train, TRAIN_PROJECTS, TRAIN_PEOPLE)
    evals = lines(random.Random(args.seed * 1000 + 1), args.eval, EVAL_PROJECTS, EVAL_PEOPLE)
    for name, ls in (("train.jsonl", train), ("eval.jsonl", evals)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(ls) + "\n")
    print(f"wrote {len(train)} train and {len(evals)} eval samples to {args.out}")


if __name__ == "__main__":
    main()
