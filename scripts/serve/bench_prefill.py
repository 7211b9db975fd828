#!/usr/bin/env python3
"""What a long prompt does to the replies in flight, on a running `serve`.

    bench_prefill.py URL MODEL [--clients 4] [--prompt-words 1200] [--rounds 3]

`--clients` clients stream replies that cannot end early (a guided string of at least 4000
characters, --reply-tokens at most); once every one of them has its first
tokens, another client sends a long prompt (`--prompt-words` words of varied text, new words every
round so the prompt cache cannot help) asking for one token. Reported per round, as one JSON line:
the long prompt's tokens and its time to the first token, and for the streaming clients the
longest gap between two of their events while that prompt was prefilled (a chunked prefill
bounds it by one chunk's time; a whole prefill stalls them for all of it) and their median gap
after it. The streaming clients leave (their requests are cancelled) once the long prompt has its
token and they have five more events each. Exits 1 if a request fails.
"""
import argparse
import json
import statistics
import threading
import time
import urllib.parse

import http.client

WORDS = ("river stone lantern orchard meadow harbor copper violet thunder candle garden willow "
         "silver morning quiet journey market ember winter falcon signal paper ladder compass").split()


def long_text(words, round_):
    # a different sequence every round (a linear congruential walk over the word list)
    x, out = 7919 * (round_ + 1), []
    for _ in range(words):
        x = (1103515245 * x + 12345) % (1 << 31)
        out.append(WORDS[x % len(WORDS)])
    return "Summarize this text: " + " ".join(out)


def stream(url, body, on_event):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
    usage = None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        if line[6:] == "[DONE]":
            break
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        usage = chunk.get("usage") or usage
        # events that carry tokens (not the first one, which only names the role)
        if any(c["delta"].get("content") or c.get("finish_reason") for c in chunk.get("choices", [])) \
                and on_event(time.monotonic()):
            break
    conn.close()
    return usage


def one_round(url, model, clients, prompt_words, reply_tokens, round_):
    events = [[] for _ in range(clients)]
    errors = []
    done = [None]  # when the long prompt had its token
    started = threading.Barrier(clients + 1)
    body = {"model": model, "messages": [{"role": "user", "content": "Write a long story."}],
            "max_tokens": reply_tokens, "stream": True,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "story", "schema": {"type": "string", "minLength": 4000}}}}

    def client(i):
        seen = [False]

        def on_event(t):
            events[i].append(t)
            if len(events[i]) == 5 and not seen[0]:
                seen[0] = True
                started.wait()
            return done[0] is not None and sum(1 for x in events[i] if x > done[0]) >= 5
        try:
            stream(url, body, on_event)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
            started.abort()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    started.wait(timeout=600)
    long_body = {"model": model, "messages": [{"role": "user", "content": long_text(prompt_words, round_)}],
                 "max_tokens": 1, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    first = []
    usage = stream(url, long_body, lambda t: first.append(t))
    t1 = first[0] if first else time.monotonic()
    done[0] = t1
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    during, outside = [], []
    for ev in events:
        for a, b in zip(ev, ev[1:]):
            if b > t0 and a < t1:
                during.append(b - a)
            elif a >= t1:
                outside.append(b - a)
    return {"round": round_ + 1, "prompt_tokens": usage["prompt_tokens"] if usage else None,
            "long_prompt_ttft_s": round(t1 - t0, 3),
            "longest_gap_during_prefill_ms": round(1000 * max(during), 1) if during else None,
            "median_gap_after_ms": round(1000 * statistics.median(outside), 1) if outside else None}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--prompt-words", type=int, default=1200)
    p.add_argument("--reply-tokens", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    for r in range(a.rounds):
        print(json.dumps(one_round(a.url, a.model, a.clients, a.prompt_words, a.reply_tokens, r)), flush=True)
        time.sleep(1)  # the left requests' slots free


if __name__ == "__main__":
    main()
