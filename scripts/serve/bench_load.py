#!/usr/bin/env python3
"""Load on a running `serve`: streaming chat requests from concurrent clients, each client on its
own adapter (models are dealt round-robin), measured from the client side.

    bench_load.py URL --models a,b,c,d [--clients 8] [--seconds 60] [--max-tokens 96] [--pid PID]

Reports per phase: requests, errors, completion tokens, aggregate tokens/s (completion tokens
over the phase's wall time, prefill included), time to first token p50/p99, and with --pid the
server's RSS sampled every --rss-every seconds (first, last, max, and the slope of a line fitted
to the second half, in MB per minute). `--baseline-seconds` first runs one client alone for the
"one client" figure, and `--rounds N` alternates the two phases N times (the speed-up printed is the
median of the rounds' ratios). From the server's /health counters: rows per batched pass, ms per pass,
mean prefill time, prompt length and positions reused from the prompt cache, and the shares of the phase's wall time the decoding
thread spent prefilling, in passes and choosing tokens. Exits 1 if any request failed.
"""
import argparse
import json
import statistics
import threading
import time

import http.client
import urllib.parse

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle works, step by step.",
    "Describe a walk through a forest in autumn.",
    "List some ideas for a rainy weekend and explain each.",
    "Tell me about the history of bread.",
    "Write a letter to a friend about a trip to the sea.",
]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one_request(conn, model, prompt, max_tokens, seed):
    """Streams one chat completion on `conn`; returns (ttft seconds, completion tokens, seconds)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0.8, "seed": seed, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.monotonic()
    ttft, tokens = None, None
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
        for c in chunk.get("choices", []):
            if ttft is None and c["delta"].get("content"):
                ttft = time.monotonic() - t0
    r.read()  # the rest of the chunked body, so the connection can be reused
    if tokens is None:
        raise RuntimeError("no usage chunk")
    return (ttft if ttft is not None else time.monotonic() - t0), tokens, time.monotonic() - t0


def health(url):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        conn.request("GET", "/health")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def phase(name, url, models, clients, seconds, max_tokens, pid=None, rss_every=5.0):
    before = health(url)
    stop_at = time.monotonic() + seconds
    results, errors, lock = [], [], threading.Lock()

    def client_loop(i):
        model = models[i % len(models)]
        n = 0
        u = urllib.parse.urlparse(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
        while time.monotonic() < stop_at:
            try:
                # every request's own words after a shared system message (the chat template's):
                # a prompt cache can reuse the system message, never a whole earlier prompt
                prompt = f"{PROMPTS[(i + n) % len(PROMPTS)]} (client {i}, request {n})"
                r = one_request(conn, model, prompt, max_tokens, seed=1000 * i + n)
                with lock:
                    results.append(r)
            except Exception as e:  # counted and reported, never hidden
                with lock:
                    errors.append(f"client {i} ({model}): {e}")
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
            n += 1
        conn.close()

    rss = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if pid:
            rss.append((time.monotonic() - t0, rss_mb(pid)))
        for t in threads:
            t.join(timeout=rss_every / len(threads))
    wall = time.monotonic() - t0
    tokens = sum(r[1] for r in results)
    ttfts = sorted(r[0] for r in results)

    def pct(p):
        return ttfts[min(len(ttfts) - 1, int(p / 100 * len(ttfts)))] if ttfts else float("nan")

    out = {"phase": name, "clients": clients, "models": models[:clients] if clients < len(models) else models,
           "requests": len(results), "errors": len(errors), "completion_tokens": tokens, "seconds": round(wall, 1),
           "tokens_per_second": round(tokens / wall, 1), "ttft_p50_ms": round(1000 * pct(50)), "ttft_p99_ms": round(1000 * pct(99))}
    # where the server's decoding thread spent the phase (its /health counters; zeros from a
    # server too old to count them)
    after = health(url)
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("passes", "row_steps", "prefills", "prefill_tokens", "prefill_seconds", "pass_seconds", "choose_seconds",
                                           "prompt_cache_hits", "prompt_tokens_reused")}
    if d["passes"]:
        out.update({"rows_per_pass": round(d["row_steps"] / d["passes"], 2), "ms_per_pass": round(1000 * d["pass_seconds"] / d["passes"], 2)})
    if d["prefills"]:
        out.update({"prefill_ms": round(1000 * d["prefill_seconds"] / d["prefills"], 1), "prefill_tokens_mean": round(d["prefill_tokens"] / d["prefills"], 1),
                    "prompt_cache_hits": d["prompt_cache_hits"], "reused_tokens_mean": round(d["prompt_tokens_reused"] / d["prefills"], 1)})
    out.update({"share_prefill": round(d["prefill_seconds"] / wall, 3), "share_passes": round(d["pass_seconds"] / wall, 3),
                "share_choose": round(d["choose_seconds"] / wall, 3)})
    if rss:
        half = rss[len(rss) // 2:]
        slope = 0.0
        if len(half) >= 2:
            mx = statistics.mean(t for t, _ in half)
            my = statistics.mean(v for _, v in half)
            den = sum((t - mx) ** 2 for t, _ in half)
            slope = 60 * sum((t - mx) * (v - my) for t, v in half) / den if den else 0.0
        out.update({"rss_first_mb": round(rss[0][1]), "rss_last_mb": round(rss[-1][1]), "rss_max_mb": round(max(v for _, v in rss)),
                    "rss_slope_mb_per_min_second_half": round(slope, 2), "rss_samples": len(rss)})
    for e in errors[:10]:
        print("error:", e)
    print(json.dumps(out), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url")
    ap.add_argument("--models", required=True, help="comma-separated model ids, dealt to clients round-robin")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--baseline-seconds", type=float, default=0, help="first run one client alone this long")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--pid", type=int, help="the server's pid, to sample its RSS")
    ap.add_argument("--rss-every", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --baseline-seconds: alternate the one-client and the loaded phase this many times "
                         "(on a shared, noisy machine a slow spell then hits both sides of some ratios)")
    a = ap.parse_args()
    models = a.models.split(",")
    runs, ratios = [], []
    for _ in range(max(1, a.rounds) if a.baseline_seconds > 0 else 1):
        one = phase("one client", a.url, models, 1, a.baseline_seconds, a.max_tokens, a.pid, a.rss_every) if a.baseline_seconds > 0 else None
        many = phase(f"{a.clients} clients", a.url, models, a.clients, a.seconds, a.max_tokens, a.pid, a.rss_every)
        runs += [r for r in (one, many) if r]
        if one:
            ratios.append(many["tokens_per_second"] / one["tokens_per_second"])
    if ratios:
        out = {"speedup": round(statistics.median(ratios), 2)}
        if len(ratios) > 1:
            out.update({"speedups": [round(r, 2) for r in ratios], "rounds": len(ratios)})
        print(json.dumps(out))
    raise SystemExit(1 if any(r["errors"] for r in runs) else 0)


if __name__ == "__main__":
    main()
