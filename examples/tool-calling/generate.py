#!/usr/bin/env python3
"""Generates the tool-calling example: train.jsonl and eval.jsonl.

Three tools are defined on the system message (Schema.md, "Tool calling"): get_weather(city,
unit), convert_currency(amount, from, to) and set_timer(minutes). In each conversation the
user asks for one thing; the assistant calls the right tool with the right arguments, a tool
turn returns the result, and the assistant answers from it in one fixed sentence. One in ten
conversations needs no tool (a greeting or thanks), and the assistant answers directly.
Evaluate with `evaluate-adapter --turns all` so both the call and the answer are scored.

Held out: eval cities and amounts come from lists training never uses, and no eval request
text appears in training. Deterministic (seeded); Python 3 standard library only.
"""
import argparse
import json
import os
import random

SYSTEM = "You are a helpful assistant with tools."
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
     "arguments": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "convert_currency", "description": "Convert money between currencies",
     "arguments": {"type": "object", "properties": {"amount": {"type": "number"}, "from": {"type": "string"}, "to": {"type": "string"}},
                   "required": ["amount", "from", "to"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "set_timer", "description": "Start a countdown timer",
     "arguments": {"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 1}},
                   "required": ["minutes"], "additionalProperties": False}}},
]

TRAIN_CITIES = ["Oslo", "Berlin", "Paris", "Madrid", "Tokyo", "Lima", "Cairo", "Toronto", "Sydney", "Dublin", "Seoul",
                "Nairobi", "Lisbon", "Denver", "Mumbai", "Vienna", "Quito", "Hanoi", "Prague", "Austin"]
EVAL_CITIES = ["Bergen", "Munich", "Lyon", "Osaka", "Accra", "Helsinki", "Boston", "Porto", "Perth", "Zurich"]
CURRENCIES = {"USD": ["dollars", "USD", "US dollars", "bucks"], "EUR": ["euros", "EUR", "euro"],
              "GBP": ["pounds", "GBP", "British pounds"], "JPY": ["yen", "JPY", "Japanese yen"],
              "CHF": ["Swiss francs", "CHF", "francs"], "CAD": ["Canadian dollars", "CAD"]}
RATES = {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 151.0, "CHF": 0.88, "CAD": 1.36}
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]


def weather(rng, cities):
    city = rng.choice(cities)
    unit = "f" if rng.random() < 0.3 else "c"
    say_city = city.lower() if rng.random() < 0.15 else city
    u = rng.choice([" in fahrenheit", " in °F", " (fahrenheit please)"]) if unit == "f" else rng.choice(["", "", " in celsius", ""])
    text = rng.choice([f"What's the weather in {say_city}{u}?", f"how's the weather in {say_city} right now{u}",
                       f"Is it cold in {say_city} today?{u}", f"weather {say_city}{u}", f"Tell me the weather for {say_city}{u}.",
                       f"Do I need an umbrella in {say_city}?{u}"])
    temp = rng.randint(-5, 35) if unit == "c" else rng.randint(23, 95)
    cond = rng.choice(CONDITIONS)
    result = json.dumps({"temperature": temp, "conditions": cond}, separators=(",", ":"))
    answer = f"It is {temp}°{unit.upper()} and {cond} in {city}."
    return text, "get_weather", {"city": city, "unit": unit}, result, answer


def money(rng, amounts):
    src, dst = rng.sample(sorted(CURRENCIES), 2)
    amount = rng.choice(amounts)
    a = str(amount)
    text = rng.choice([f"Convert {a} {rng.choice(CURRENCIES[src])} to {rng.choice(CURRENCIES[dst])}",
                       f"how much is {a} {rng.choice(CURRENCIES[src])} in {rng.choice(CURRENCIES[dst])}?",
                       f"What are {a} {rng.choice(CURRENCIES[src])} worth in {rng.choice(CURRENCIES[dst])}?",
                       f"{a} {src} to {dst}", f"I have {a} {rng.choice(CURRENCIES[src])}, how many {rng.choice(CURRENCIES[dst])} is that?"])
    value = round(amount / RATES[src] * RATES[dst], 2)
    result = json.dumps({"amount": value, "currency": dst}, separators=(",", ":"))
    answer = f"{a} {src} is {value:.2f} {dst}."
    return text, "convert_currency", {"amount": amount, "from": src, "to": dst}, result, answer


def timer(rng, minutes_list):
    m = rng.choice(minutes_list)
    words = {1: "one", 2: "two", 3: "three", 5: "five", 10: "ten", 15: "fifteen", 20: "twenty"}
    said = words[m] if m in words and rng.random() < 0.3 else str(m)
    unit = "minute" if m == 1 else rng.choice(["minutes", "min", "mins"])
    text = rng.choice([f"Set a timer for {said} {unit}", f"timer {said} {unit} please", f"start a {m}-minute timer",
                       f"Can you time {said} {unit} for my tea?", f"remind me in {said} {unit}"])
    result = json.dumps({"status": "running", "minutes": m}, separators=(",", ":"))
    answer = f"Your {m}-minute timer is running."
    return text, "set_timer", {"minutes": m}, result, answer


def no_tool(rng):
    return rng.choice([
        ("hi", "Hello! I can check the weather, convert currencies and set timers."),
        ("Hello there", "Hello! I can check the weather, convert currencies and set timers."),
        ("what can you do?", "I can check the weather, convert currencies and set timers."),
        ("What can you help with", "I can check the weather, convert currencies and set timers."),
        ("thanks!", "You're welcome!"),
        ("thank you", "You're welcome!"),
    ])


def sample(rng, cities, amounts, minutes):
    system = {"role": "system", "content": SYSTEM, "tools": TOOLS}
    if rng.random() < 0.1:
        text, answer = no_tool(rng)
        return text, [system, {"role": "user", "content": text}, {"role": "assistant", "content": answer}]
    kind = rng.choice([weather, money, timer])
    arg = {weather: cities, money: amounts, timer: minutes}[kind]
    text, name, args, result, answer = kind(rng, arg)
    return text, [
        system,
        {"role": "user", "content": text},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                                                             "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": name, "content": result},
        {"role": "assistant", "content": answer},
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=600)
    ap.add_argument("--eval", type=int, default=100)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()
    train_amounts = [5, 10, 20, 25, 50, 75, 100, 150, 200, 500, 1000, 12.5]
    eval_amounts = [30, 40, 60, 250, 300, 800, 7.5]
    train_minutes = [1, 2, 3, 5, 10, 15, 20, 25, 30, 45, 60]
    eval_minutes = [4, 7, 12, 18, 40, 90]

    rng = random.Random(args.seed)
    seen, train = set(), []
    no_tool_texts = set()
    while len(train) < args.train:
        text, messages = sample(rng, TRAIN_CITIES, train_amounts, train_minutes)
        if len(messages) == 3:
            no_tool_texts.add(text.lower())
        elif text.lower() in seen:
            continue
        seen.add(text.lower())
        train.append(json.dumps({"messages": messages}, ensure_ascii=False))
    erng = random.Random(args.seed * 1000 + 1)
    evals = []
    while len(evals) < args.eval:
        text, messages = sample(erng, EVAL_CITIES, eval_amounts, eval_minutes)
        if len(messages) == 5 and text.lower() in seen:
            continue
        seen.add(text.lower())
        evals.append(json.dumps({"messages": messages}, ensure_ascii=False))
    for name, lines in (("train.jsonl", train), ("eval.jsonl", evals)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines) + "\n")
    print(f"wrote {len(train)} train and {len(evals)} eval samples to {args.out}")


if __name__ == "__main__":
    main()
