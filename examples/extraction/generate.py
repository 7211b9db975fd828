#!/usr/bin/env python3
"""Generates the calendar-extraction example: train.jsonl and eval.jsonl.

Each sample is a short natural-language calendar request ("lunch w/ Ana next Tuesday at
12:30pm for an hour") and the event it describes as one compact JSON object under a
response_format schema (Schema.md, "Guided generation"). Replies are canonical: fixed key
order, compact JSON, 24-hour "HH:MM" start, duration in minutes (null when not said),
attendees in the order named, location or null; so exact match of the reply is meaningful.

Held-out honestly: eval attendees come from a name list that training never uses, half of
the eval locations are places training never mentions, and no eval request text appears in
training. Deterministic: the same seed writes the same files byte for byte.
Python 3 standard library only; run from anywhere: python3 examples/extraction/generate.py
"""
import argparse
import json
import os
import random

SYSTEM = "Turn the calendar request into JSON."

DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
DAY_ABBR = {"monday": ["Mon"], "tuesday": ["Tue", "Tues"], "wednesday": ["Wed"], "thursday": ["Thu", "Thurs"],
            "friday": ["Fri"], "saturday": ["Sat"], "sunday": ["Sun"]}

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "day": {"type": "string"},
        "start": {"type": "string"},
        "minutes": {"type": ["integer", "null"]},
        "attendees": {"type": "array", "items": {"type": "string"}},
        "location": {"type": ["string", "null"]},
    },
    "required": ["title", "day", "start", "minutes", "attendees", "location"],
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "Event", "strict": True, "schema": SCHEMA}}

# activity phrasings -> the canonical title
ACTIVITIES = [
    (["lunch", "lunch", "grab lunch", "a lunch"], "Lunch"),
    (["coffee", "coffee", "a coffee", "grab coffee"], "Coffee"),
    (["dinner", "dinner", "a dinner"], "Dinner"),
    (["standup", "team standup", "the standup"], "Standup"),
    (["one-on-one", "a one-on-one", "1-on-1"], "One-on-one"),
    (["project review", "a project review"], "Project review"),
    (["call", "a call", "phone call", "a quick call"], "Call"),
    (["interview", "an interview"], "Interview"),
    (["dentist appointment", "the dentist"], "Dentist"),
    (["yoga", "yoga class"], "Yoga"),
    (["planning session", "planning"], "Planning"),
    (["budget meeting", "a budget meeting"], "Budget meeting"),
    (["design sync", "a design sync"], "Design sync"),
    (["haircut", "a haircut"], "Haircut"),
    (["workout", "gym session", "a workout"], "Workout"),
    (["demo", "a demo", "product demo"], "Demo"),
    (["drinks", "after-work drinks"], "Drinks"),
    (["tennis", "a tennis match"], "Tennis"),
]

TRAIN_NAMES = ["Ana", "Ben", "Chloe", "David", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemal", "Lena",
               "Marco", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Ximena",
               "Yusuf", "Zoe", "Liam", "Maya", "Noah", "Olga", "Pablo", "Rita", "Sam", "Tomas", "Ugo", "Kofi",
               "Lucia", "Mateo", "Nina", "Oscar"]
EVAL_NAMES = ["Aisha", "Bruno", "Carla", "Dmitri", "Emma", "Felix", "Gita", "Hugo", "Ivy", "Jamal", "Kira", "Leo",
              "Mina", "Nils", "Odette", "Pavel", "Rhea", "Soren", "Talia", "Viktor"]
TRAIN_PLACES = ["Cafe Luna", "Blue Bottle", "Room 4B", "the office", "Pier 39", "Luigi's", "the gym", "Room 210",
                "Green Leaf", "City Hall", "the library", "Studio 3", "Main Street Diner", "Room 12", "the park"]
EVAL_PLACES = ["Sunrise Bakery", "Room 7C", "the lobby", "Harbor Grill", "Room 305", "the studio", "Oak Tavern"]

# Training also sees names and places made up on the spot, most of them new to the model: with only
# the 40 names above, an adapter learns those names as whole answers and garbles the eval's unseen
# ones ("Dhanter" for "Dmitri"). A fresh name in most samples makes it learn to copy instead.
ONSETS = ["B", "D", "F", "G", "H", "J", "K", "L", "M", "N", "P", "R", "S", "T", "V", "Y", "Z", "Br", "Ch", "Dr",
          "Gr", "Kr", "Sh", "St", "Th", "Tr", "Al", "El", "Is", "Or", "Ul", "Am"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ia", "ei", "ou", "y"]
CODAS = ["", "", "", "", "n", "r", "l", "s", "m", "th", "nd", "x", "k", "ra", "na", "lo", "ne"]
PLACE_WORDS = ["Maple", "Golden", "Silver", "Red", "Corner", "River", "Lotus", "Copper", "Olive", "North", "Cedar",
               "Lucky", "Old Town", "Pine", "Salt", "Velvet", "Stone", "Little", "Bay", "Summit"]
PLACE_KINDS = ["Cafe", "Bistro", "Kitchen", "Diner", "Bar", "Lounge", "Deli", "Garden", "Pub", "Noodle House",
               "Brewery", "Hall", "Court", "Center", "Market"]
HELD_OUT = {n.lower() for n in EVAL_NAMES} | {p.lower() for p in EVAL_PLACES}


def made_up_name(rng):
    while True:
        name = rng.choice(ONSETS) + rng.choice(VOWELS)
        for _ in range(rng.choice([0, 1, 1, 2])):
            name += rng.choice(["l", "n", "r", "s", "v", "d", "k", "m", "t", "sh", "nt", "b"]) + rng.choice(VOWELS)
        name += rng.choice(CODAS)
        name = name[0] + name[1:].lower()
        if 3 <= len(name) <= 9 and name.lower() not in HELD_OUT:
            return name


def made_up_place(rng):
    while True:
        r = rng.random()
        if r < 0.25:
            place = f"Room {rng.randint(1, 499)}{rng.choice(['', '', 'A', 'B', 'D', 'E'])}"
        elif r < 0.35:
            place = f"Studio {rng.randint(1, 12)}"
        else:
            place = f"{rng.choice(PLACE_WORDS + [made_up_name(rng)])} {rng.choice(PLACE_KINDS)}"
        if place.lower() not in HELD_OUT:
            return place


class TrainNames:
    """A name list for rng.sample: mostly made-up names, some from TRAIN_NAMES."""

    def __init__(self, rng):
        self.rng = rng

    def sample(self, k):
        names = []
        while len(names) < k:
            name = made_up_name(self.rng) if self.rng.random() < 0.7 else self.rng.choice(TRAIN_NAMES)
            if name not in names:
                names.append(name)
        return names

PREFIXES = ["", "", "", "schedule ", "please schedule ", "book ", "add ", "set up ", "pls put ", "can you add ",
            "put ", "new event: ", "calendar: ", "remind me about ", "I have "]
TYPO_PREFIXES = ["shedule ", "pls shedule ", "scheduel ", "boook ", "ad ", "can u add ", "plz put "]
SUFFIXES = ["", "", "", ".", " please", " thanks!", " pls", "!", " on my calendar"]

NUMBER_WORDS = {1: "one", 2: "two", 3: "three"}


def day_phrase(rng, day):
    if day == "today":
        return rng.choice(["today", "today", "later today", "2day"])
    if day == "tomorrow":
        return rng.choice(["tomorrow", "tomorrow", "tmrw", "tomorow", "tmr"])
    name = day.capitalize()
    return rng.choice([f"next {name}", f"on {name}", f"this {name}", name, f"on {rng.choice(DAY_ABBR[day])}",
                       f"next {rng.choice(DAY_ABBR[day])}", f"this coming {name}"])


def time_phrase(rng, hour, minute, twelve_hour=None):
    """The start time as a person might write it; always unambiguous about am/pm. `twelve_hour`:
    the chance of a 12-hour form (None: one form drawn from all of them alike)."""
    h12 = hour % 12 or 12
    ampm = "am" if hour < 12 else "pm"
    forms = [f"{hour:02d}:{minute:02d}", f"{hour}:{minute:02d}" if hour >= 10 else f"{hour:02d}:{minute:02d}"]
    sep = rng.choice(["", " "])
    mark = rng.choice([ampm, ampm, ampm.upper(), ampm[0] + "." + ampm[1] + "."])
    if minute == 0:
        forms += [f"{h12}{sep}{mark}", f"{h12}{sep}{mark}", f"{h12}:00{sep}{mark}"]
        if hour == 12:
            forms += ["noon", "noon", "midday"]
    else:
        forms += [f"{h12}:{minute:02d}{sep}{mark}", f"{h12}:{minute:02d}{sep}{mark}"]
    if twelve_hour is None:
        t = rng.choice(forms)
    else:
        t = rng.choice(forms[2:] if rng.random() < twelve_hour else forms[:2])
    if t in ("noon", "midday"):
        return rng.choice(["at noon", "at midday", "noon"])
    return rng.choice(["at " + t, "at " + t, "@ " + t, t])


DURATIONS = {
    15: ["for 15 minutes", "for 15 min", "for fifteen minutes", "15 mins", "for a quarter hour"],
    30: ["for 30 minutes", "for 30 min", "for half an hour", "30 mins", "for 30m", "(30 min)"],
    45: ["for 45 minutes", "for 45 min", "45 mins", "for 45m", "(45 min)"],
    60: ["for an hour", "for 1 hour", "for one hour", "for 60 minutes", "1h", "for 1h", "(1 hour)"],
    90: ["for 90 minutes", "for an hour and a half", "for 1.5 hours", "for 90 min", "(90 min)"],
    120: ["for 2 hours", "for two hours", "for 120 minutes", "2h", "for 2h"],
}


def people_phrase(rng, people):
    if not people:
        return ""
    if len(people) == 1:
        joined = people[0]
    elif len(people) == 2:
        joined = f"{people[0]} {rng.choice(['and', '&', 'and'])} {people[1]}"
    else:
        joined = f"{people[0]}, {people[1]} {rng.choice(['and', '&', 'and'])} {people[2]}"
    return rng.choice(["with ", "with ", "w/ ", "with "]) + joined


def location_phrase(rng, place):
    if place.startswith("Room"):
        return rng.choice(["in " + place, "in " + place, "@ " + place, "at " + place])
    if place.startswith("the "):
        return rng.choice(["at " + place, "in " + place])
    return rng.choice(["at " + place, "at " + place, "@ " + place])


# Training writes the start time in 12-hour form ("8:30am", "6 PM") in 80% of requests instead of
# about half: the am/pm-to-24-hour step is what a one-pass adapter gets wrong most ("8:30am" as
# 20:30, "6 pm" as 17:00). The eval keeps the plain mix.
TRAIN_TWELVE_HOUR = 0.8


def make_event(rng, names, places, twelve_hour=None):
    phrasings, title = rng.choice(ACTIVITIES)
    day = rng.choice(DAYS * 2 + ["today", "tomorrow", "tomorrow"])
    hour = rng.choice(range(7, 21))
    minute = rng.choice([0, 0, 15, 30, 30, 45])
    minutes = rng.choice([None, 15, 30, 30, 45, 60, 60, 60, 90, 120])
    n_people = rng.choice([0, 1, 1, 1, 2, 2, 3])
    people = names.sample(n_people) if isinstance(names, TrainNames) else rng.sample(names, n_people)
    place = (places(rng) if callable(places) else rng.choice(places)) if rng.random() < 0.55 else None
    event = {"title": title, "day": day, "start": f"{hour:02d}:{minute:02d}", "minutes": minutes,
             "attendees": people, "location": place}

    act = rng.choice(phrasings)
    parts = {
        "day": day_phrase(rng, day),
        "time": time_phrase(rng, hour, minute, twelve_hour),
        "dur": rng.choice(DURATIONS[minutes]) if minutes else "",
        "loc": location_phrase(rng, place) if place else "",
    }
    who = people_phrase(rng, people)
    head = (act + " " + who).strip()
    order = rng.choice([
        ["head", "day", "time", "dur", "loc"], ["head", "day", "time", "loc", "dur"], ["head", "time", "day", "dur", "loc"],
        ["day", "time", "head", "dur", "loc"], ["head", "loc", "day", "time", "dur"], ["day", "head", "time", "loc", "dur"],
        ["head", "day", "loc", "time", "dur"], ["head", "dur", "day", "time", "loc"],
    ])
    pieces = [head if k == "head" else parts[k] for k in order]
    text = " ".join(p for p in pieces if p)
    if order[0] == "day" and rng.random() < 0.5:  # "Friday 3pm: lunch with Ana"
        first, rest = text.split(" " + head, 1) if (" " + head) in text else (text, "")
        text = first + ": " + head + rest if rest is not None and head else text
    prefix = rng.choice(TYPO_PREFIXES) if rng.random() < 0.08 else rng.choice(PREFIXES)
    text = prefix + text + rng.choice(SUFFIXES)
    r = rng.random()
    if r < 0.12:
        text = text.lower()
    elif r < 0.16:
        text = text.upper()
    elif r < 0.6:
        text = text[0].upper() + text[1:]
    text = " ".join(text.split())
    return text, event


def sample_line(text, event):
    reply = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    record = {"messages": [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": text, "response_format": RESPONSE_FORMAT},
        {"role": "assistant", "content": reply},
    ]}
    return json.dumps(record, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--eval", type=int, default=200)
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    args = ap.parse_args()

    rng = random.Random(args.seed)
    train, seen = [], set()

    def train_place(r):
        return made_up_place(r) if r.random() < 0.6 else r.choice(TRAIN_PLACES)

    while len(train) < args.train:
        text, event = make_event(rng, TrainNames(rng), train_place, TRAIN_TWELVE_HOUR)
        if text.lower() in seen:
            continue
        seen.add(text.lower())
        train.append(sample_line(text, event))

    eval_rng = random.Random(args.seed * 1000 + 1)
    evals = []
    while len(evals) < args.eval:
        places = EVAL_PLACES if eval_rng.random() < 0.5 else TRAIN_PLACES
        text, event = make_event(eval_rng, EVAL_NAMES, places)
        if text.lower() in seen:
            continue
        seen.add(text.lower())
        evals.append(sample_line(text, event))

    for name, lines in (("train.jsonl", train), ("eval.jsonl", evals)):
        with open(os.path.join(args.out, name), "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(lines) + "\n")
    print(f"wrote {len(train)} train and {len(evals)} eval samples to {args.out}")


if __name__ == "__main__":
    main()
