#!/usr/bin/env bash
# Prefill and decode speed and peak memory of `.build/release/bench decode`, and the peak memory of
# .build/release/generate on a short chat (float32 and float16 KV cache), beside llama.cpp's
# llama-bench and, for generate, llama.cpp's own generation tool llama-completion on the same chat
# (scripts/peers/llama_cpp.sh builds both) in the same sitting, 2 threads, per GGUF file: one table
# per file, and runs/bench-decode/<time>.json; then ours at every CPU level from avx2 up in both
# activation modes, beside llama.cpp (its AVX2-only build at avx2, when built: see below; its
# native build runs again after them, and their ratios are to the mean of its two runs). Leaves
# out output quality. Follows llama-bench's measure (pp256, tg128: mean tokens/s of 3 runs after a
# warmup, from its JSON).
# Usage: scripts/bench-decode.sh [GGUF ...]   (default: the SmolLM2 file from scripts/fetch-model.sh)
# Knobs (environment): BENCH_LEVELS (levels to add, see below), BLAS_CORE (OpenBLAS kernels, see below).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=()
for f in "$@"; do
  [ -f "$f" ] || { echo "bench-decode: no such file: $f" >&2; exit 1; }
  models+=("$(cd "$(dirname "$f")" && pwd)/$(basename "$f")")
done
cd "$root"
threads=2 prompt=256 gen=128 reps=3
# OpenBLAS (float32 prefill's sgemm panels) runs its own choice of kernels for this CPU, as on a
# user's machine: an environment's OPENBLAS_CORETYPE is dropped (this VM image sets Haswell, which
# on Zen 5 made float32 prefill of Qwen3-0.6B 1.4x slower than OpenBLAS's own Cooperlake).
# BLAS_CORE=<an OPENBLAS_CORETYPE value> picks one; `bench decode` prints and records the core.
if [ -n "${BLAS_CORE:-}" ]; then export OPENBLAS_CORETYPE=$BLAS_CORE; else unset OPENBLAS_CORETYPE; fi
llama_bench=$(scripts/peers/llama_cpp.sh)
PEERS_DIR=${PEERS:-$HOME/.cache/adapter-peers}
[ ${#models[@]} -gt 0 ] || models=("$(scripts/fetch-model.sh)")

# Ours is built when missing (delete it, or run swift build, to measure newer sources).
ours=.build/release/bench generate=.build/release/generate
for tool in bench generate; do
  if [ ! -x ".build/release/$tool" ]; then
    echo "bench-decode: building ours: swift build -c release --product $tool" >&2
    swift build -c release --product "$tool" >&2 || true
    [ -x ".build/release/$tool" ] || echo "bench-decode: $tool COULD NOT BE BUILT (swift build's error above); its rows stay empty" >&2
  fi
done
# generate's own peak RSS (the issue's measure): a 38-token chat prompt, 128 new tokens, greedy,
# with the default float32 KV cache and with --kv-cache float16 (llama.cpp's cache is float16).
gen_args=(--prompt "Write a short poem about the sea." --max-new-tokens 128 --temperature 0)
# llama-completion on the same chat: the text generate's chat template makes of it for SmolLM2
# (ChatML with its default system message; 38 tokens), 128 new tokens past any end of turn, greedy;
# once with its default context (the model's, 8192 for SmolLM2: its KV cache is allocated and
# cleared whole) and once with the context sized to the job, as generate sizes its cache.
llama_completion=$(dirname "$llama_bench")/llama-completion
chat=$'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n'
completion_args=(-p "$chat" -n 128 --temp 0 -t "$threads" -no-cnv --ignore-eos)

stamp=$(date -u +%Y%m%dT%H%M%SZ)
dir=runs/bench-decode/$stamp
mkdir -p "$dir"
i=0
for model in "${models[@]}"; do
  i=$((i + 1))
  name=$(basename "$model")
  # llama.cpp's defaults otherwise, since they are what its users get: mmap'd weights (ours maps
  # the file too, so both peak RSS figures include the touched weight pages), f16 KV cache, flash
  # attention "auto", batch 2048 / ubatch 512 (the 256-token prompt is one batch), one warmup run.
  # -p/-n tests run apart: pp256 from an empty context, tg128 generating 128 tokens from an empty
  # context. Peak RSS is this process's.
  cut -d' ' -f1-3 /proc/loadavg > "$dir/$i.loadavg"
  echo "== $name: llama.cpp llama-bench -t $threads -p $prompt -n $gen -r $reps (load average $(cat "$dir/$i.loadavg"))" >&2
  scripts/peers/peak_rss.py "$dir/$i.llama_rss.json" -- \
    "$llama_bench" -m "$model" -t "$threads" -p "$prompt" -n "$gen" -r "$reps" -o json > "$dir/$i.llama.json"
  # A second llama-bench process also times tg128 at depth 256 (128 tokens generated after 256 in
  # the KV cache; ours: bench decode --decode-depth); its RSS is not used.
  echo "== $name: llama.cpp llama-bench -t $threads -n $gen -d $prompt -r $reps" >&2
  "$llama_bench" -m "$model" -t "$threads" -p 0 -n "$gen" -d "$prompt" -r "$reps" -o json > "$dir/$i.llama_depth.json"
  rm -f "$dir/$i.ours.json"
  if [ -x "$ours" ]; then
    echo "== $name: ours bench decode" >&2
    "$ours" decode --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" --repeats "$reps" --threads "$threads" \
      --decode-depth "$prompt" --out "$dir/$i.ours.json" >&2 || echo "bench-decode: OURS FAILED on $name; its column is empty" >&2
  fi
  for kv in float32 float16; do
    rm -f "$dir/$i.generate_$kv.json"
    if [ -x "$generate" ]; then
      echo "== $name: ours generate --kv-cache $kv" >&2
      scripts/peers/peak_rss.py "$dir/$i.generate_$kv.json" -- "$generate" --base-model "$model" "${gen_args[@]}" --kv-cache "$kv" \
        > /dev/null 2> "$dir/$i.generate_$kv.err" || echo "bench-decode: generate FAILED on $name (see $dir/$i.generate_$kv.err)" >&2
    fi
  done
  for ctx in default sized; do
    # a model's default context can be long (131,072 positions for the Llama-3.2 shapes: a 1B
    # file's whole-context cache took 5.5 GB), so files over 1 GB get only the sized run
    if [ "$ctx" = default ] && [ "$(stat -c %s "$model")" -gt 1000000000 ]; then
      echo "== $name: llama-completion at its default context left out (a file over 1 GB: its KV cache for the model's whole context may not fit)" >&2
      rm -f "$dir/$i.completion_default.json"; continue
    fi
    echo "== $name: llama.cpp llama-completion ($ctx context)" >&2
    extra=(); [ "$ctx" = sized ] && extra=(-c $((38 + 128)))
    scripts/peers/peak_rss.py "$dir/$i.completion_$ctx.json" -- "$llama_completion" -m "$model" "${completion_args[@]}" "${extra[@]}" \
      > /dev/null 2> "$dir/$i.completion_$ctx.err" || echo "bench-decode: llama-completion FAILED on $name (see $dir/$i.completion_$ctx.err)" >&2
  done
  # Every CPU level from avx2 up to the CPU's best, each in both activation modes (ADAPTER_CPU_LEVEL
  # lowers ours), beside llama.cpp's native build and, at avx2, its AVX2-only build when there is
  # one (LLAMA_CPP_LEVEL=avx2 scripts/peers/llama_cpp.sh; BENCH_LLAMA_AVX2=1 builds it here, a
  # long build). BENCH_LEVELS="avx2 ..." picks the levels; BENCH_LEVELS=none skips the section.
  if [ -x "$ours" ] && [ -f "$dir/$i.ours.json" ]; then
    best=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cpu_level"])' "$dir/$i.ours.json")
    if [ -n "${BENCH_LEVELS:-}" ]; then levels=$BENCH_LEVELS
    else
      levels=""; on=0
      for l in portable avx2 avx512 avx512vnni; do
        [ "$l" = avx2 ] && on=1
        [ $on = 1 ] && levels="$levels $l"
        [ "$l" = "$best" ] && break
      done
    fi
    llama_avx2=$PEERS_DIR/llama.cpp-avx2/bin/llama-bench
    if [ "${BENCH_LLAMA_AVX2:-0}" = 1 ] && [ ! -x "$llama_avx2" ]; then LLAMA_CPP_LEVEL=avx2 scripts/peers/llama_cpp.sh >/dev/null || true; fi
    if [ "$levels" != none ] && [ "$best" != avx2 ] && [ -x "$llama_avx2" ]; then
      echo "== $name: llama.cpp (AVX2 build) llama-bench -t $threads -p $prompt -n $gen -r $reps" >&2
      "$llama_avx2" -m "$model" -t "$threads" -p "$prompt" -n "$gen" -r "$reps" -o json > "$dir/$i.llama_avx2.json" || rm -f "$dir/$i.llama_avx2.json"
    fi
    [ "$levels" = none ] && levels=""
    for level in $levels; do
      for act in float32 q8; do
        echo "== $name: ours bench decode at $level, --activations $act" >&2
        ADAPTER_CPU_LEVEL=$level "$ours" decode --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" --repeats "$reps" \
          --threads "$threads" --activations "$act" --out "$dir/$i.level_${level}_$act.json" >&2 \
          || echo "bench-decode: OURS FAILED at $level / $act on $name" >&2
      done
    done
    # llama.cpp's native build once more after the levels: their ratios are to the mean of its
    # runs before and after ours (the machine's speed drifts by 10-15% over minutes)
    rm -f "$dir/$i.llama_after.json"
    if [ -n "$levels" ]; then
      echo "== $name: llama.cpp llama-bench -t $threads -p $prompt -n $gen -r $reps, after ours" >&2
      "$llama_bench" -m "$model" -t "$threads" -p "$prompt" -n "$gen" -r "$reps" -o json > "$dir/$i.llama_after.json" || rm -f "$dir/$i.llama_after.json"
    fi
  fi
  python3 - "$dir" "$i" "$model" "$prompt" "$gen" "$threads" <<'PY'
import glob, json, os, sys
d, i, model, prompt, gen, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
load = lambda p: json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else None
tests, depth, rss = load(f"{d}/{i}.llama.json"), load(f"{d}/{i}.llama_depth.json"), load(f"{d}/{i}.llama_rss.json")
ours = load(f"{d}/{i}.ours.json")
generate = {kv: load(f"{d}/{i}.generate_{kv}.json") for kv in ("float32", "float16")}
completion = {ctx: load(f"{d}/{i}.completion_{ctx}.json") for ctx in ("default", "sized")}
completion = {ctx: c["peak_rss_mb"] for ctx, c in completion.items() if c and c.get("exit_code") == 0}
if ours:
    for kv, g in generate.items():
        if g and g.get("exit_code") == 0:
            ours[f"generate_peak_rss_mb_kv_{kv}"] = g["peak_rss_mb"]
loadavg = open(f"{d}/{i}.loadavg").read().split()

def pick(rows, n_prompt, n_gen, n_depth):
    hits = [r for r in rows or [] if (r["n_prompt"], r["n_gen"], r.get("n_depth", 0)) == (n_prompt, n_gen, n_depth)]
    if len(hits) != 1:
        sys.exit(f"bench-decode: expected one llama-bench test with n_prompt={n_prompt} n_gen={n_gen} n_depth={n_depth}, found {len(hits)}")
    r = hits[0]
    return {"tokens_per_s": r["avg_ts"], "stddev": r["stddev_ts"], "samples": r.get("samples_ts", [])}

pp, tg, tgd = pick(tests, prompt, 0, 0), pick(tests, 0, gen, 0), pick(depth, 0, gen, prompt)
t0 = tests[0]
llama = {"build": f"b{t0['build_number']}", "commit": t0["build_commit"], "cpu_info": t0["cpu_info"], "backends": t0["backends"],
         "model_type": t0["model_type"], "model_size_bytes": t0["model_size"], "n_threads": t0["n_threads"],
         "type_k": t0["type_k"], "type_v": t0["type_v"], "flash_attn": t0["flash_attn"], "load_mode": t0.get("load_mode"),
         f"pp{prompt}": pp, f"tg{gen}": tg, f"tg{gen}_at_depth{prompt}": tgd, "peak_rss_mb": rss["peak_rss_mb"],
         "completion_peak_rss_mb": completion}

rows = [(f"prefill tokens/s (pp{prompt})", pp, "prefill_tokens_per_s", True),
        (f"decode tokens/s (tg{gen})", tg, "decode_tokens_per_s", True),
        (f"decode tokens/s (tg{gen} @ depth {prompt})", tgd, "decode_at_depth_tokens_per_s", True),
        ("peak RSS MB (llama-bench; bench decode)", {"tokens_per_s": rss["peak_rss_mb"], "stddev": None}, "peak_rss_mb", False),
        ("generate peak RSS MB vs llama-bench", {"tokens_per_s": rss["peak_rss_mb"], "stddev": None}, "generate_peak_rss_mb_kv_float32", False),
        ("  with --kv-cache float16", {"tokens_per_s": rss["peak_rss_mb"], "stddev": None}, "generate_peak_rss_mb_kv_float16", False)]
for ctx, label, short in (("default", "generate vs llama-completion, default context", "default"), ("sized", "generate vs llama-completion -c 166", "-c 166")):
    if ctx in completion:
        for kv, name in (("float32", label), ("float16", f"  with --kv-cache float16 ({short})")):
            rows.append((name, {"tokens_per_s": completion[ctx], "stddev": None}, f"generate_peak_rss_mb_kv_{kv}", False))
print(f"\n{os.path.basename(model)}: {threads} threads, llama.cpp {llama['build']} ({llama['commit']}), {llama['cpu_info']}; load average {' '.join(loadavg)} at the start")
print(f"{'':52} {'llama.cpp':>16} {'ours':>10} {'ours/llama.cpp':>15}")
ratios, noisy = {}, []
for label, l, key, _ in rows:
    lv = l["tokens_per_s"]
    ls = f"{lv:.1f}" + (f" ±{l['stddev']:.1f}" if l["stddev"] is not None else "")
    if l.get("samples") and max(l["samples"]) > 1.15 * min(l["samples"]):
        noisy.append(f"{label}: {', '.join(f'{x:.1f}' for x in l['samples'])}")
    ov = ours.get(key) if ours and key else None
    if ov is None:
        print(f"{label:52} {ls:>16} {'-':>10} {'-':>15}"); continue
    ratios[label] = ov / lv
    print(f"{label:52} {ls:>16} {ov:10.1f} {ov / lv:14.2f}x")
if noisy:
    print("NOISY: llama.cpp's runs differ by more than 15% (other work on the machine?); rerun when idle. Runs: " + "; ".join(noisy))
if ours:
    extra = f", activations {ours['activations']}" if ours.get("activations") else ""
    print(f"ours: {ours['bytes_per_token'] / 1e6:.1f} MB read per decoded token, {ours['streamed_gb_s']:.1f} GB/s = "
          f"{100 * ours['fraction_of_bandwidth']:.0f}% of the measured {ours['bandwidth_gb_s']:.1f} GB/s; load {ours['load_seconds']:.2f} s; "
          f"base weights {ours['base_weights']}{extra}")
    if ours['fraction_of_bandwidth'] > 1:
        print("(more than the bandwidth probe, which reads once just after ours' runs: the machine's memory bandwidth moved during"
              " the run; compare ratios from one sitting)")
    print(f"(ours decodes {gen} tokens from an empty context, as llama-bench's tg{gen}, and after {prompt} tokens of context for the @ depth row"
          f" (our float32 KV cache against llama.cpp's float16 one);"
          f" generate's rows: 38 prompt tokens and 128 new, beside llama-bench's peak RSS and llama-completion's on the same chat)")
else:
    print("ours: not measured (bench decode missing or failed, see above)")
# every level and activation mode beside llama.cpp: its native build, and its AVX2 build at avx2
llama_avx2, llama_after = load(f"{d}/{i}.llama_avx2.json"), load(f"{d}/{i}.llama_after.json")
peer_at = {"native": (pp, tg)}
if llama_after:
    pp2, tg2 = pick(llama_after, prompt, 0, 0), pick(llama_after, 0, gen, 0)
    mean = lambda a, b: {"tokens_per_s": (a["tokens_per_s"] + b["tokens_per_s"]) / 2, "stddev": None, "before": a["tokens_per_s"], "after": b["tokens_per_s"]}
    peer_at["native"] = (mean(pp, pp2), mean(tg, tg2))
    llama["after_ours"] = {f"pp{prompt}": pp2, f"tg{gen}": tg2}
if llama_avx2:
    peer_at["avx2"] = (pick(llama_avx2, prompt, 0, 0), pick(llama_avx2, 0, gen, 0))
levels = []
for path in sorted(glob.glob(f"{d}/{i}.level_*.json")):
    o = load(path)
    if not o:
        continue
    peer = "avx2" if o["cpu_level"] == "avx2" and "avx2" in peer_at else "native"
    lp, lt = peer_at[peer]
    levels.append({"cpu_level": o["cpu_level"], "activations": o["activations"], "llama_cpp_build": peer,
                   "prefill_tokens_per_s": o["prefill_tokens_per_s"], "decode_tokens_per_s": o["decode_tokens_per_s"],
                   "prefill_ratio": o["prefill_tokens_per_s"] / lp["tokens_per_s"], "decode_ratio": o["decode_tokens_per_s"] / lt["tokens_per_s"],
                   "streamed_gb_s": o["streamed_gb_s"]})
if levels:
    if llama_after:
        (np_, nt_) = peer_at["native"]
        print(f"\nllama.cpp's native build before ours and after the levels: pp{prompt} {np_['before']:.1f} -> {np_['after']:.1f}, "
              f"tg{gen} {nt_['before']:.1f} -> {nt_['after']:.1f}; the levels' ratios are to the means ({np_['tokens_per_s']:.1f} / {nt_['tokens_per_s']:.1f})")
    print(f"\nevery level, both activation modes (pp{prompt} / tg{gen} tokens/s; ratios to llama.cpp's native build"
          + (f", at avx2 to its AVX2 build: {peer_at['avx2'][0]['tokens_per_s']:.1f} / {peer_at['avx2'][1]['tokens_per_s']:.1f})" if "avx2" in peer_at else
             "; no AVX2 llama.cpp build: LLAMA_CPP_LEVEL=avx2 scripts/peers/llama_cpp.sh makes one)"))
    print(f"{'level':12} {'activations':12} {'prefill':>9} {'decode':>9} {'prefill ratio':>14} {'decode ratio':>13} {'GB/s':>6}")
    for l in levels:
        print(f"{l['cpu_level']:12} {l['activations']:12} {l['prefill_tokens_per_s']:9.1f} {l['decode_tokens_per_s']:9.1f} "
              f"{l['prefill_ratio']:13.2f}x {l['decode_ratio']:12.2f}x {l['streamed_gb_s']:6.1f}")
json.dump({"model": model, "loadavg_at_start": [float(x) for x in loadavg], "noisy": noisy, "llama_cpp": llama, "ours": ours, "ratios_ours_over_llama_cpp": ratios,
           "levels": levels, "llama_cpp_avx2": {"pp": peer_at["avx2"][0], "tg": peer_at["avx2"][1]} if "avx2" in peer_at else None},
          open(f"{d}/{i}.entry.json", "w"), indent=1)
PY
done

python3 - "$dir" "$stamp" "$threads" "$(dirname "$llama_bench")/../BUILD" <<'PY'
import glob, json, os, sys
d, stamp, threads, peer = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
entries = [json.load(open(p)) for p in sorted(glob.glob(f"{d}/*.entry.json"), key=lambda p: int(os.path.basename(p).split(".")[0]))]
build = dict(l.rstrip("\n").split("=", 1) for l in open(peer) if "=" in l) if os.path.exists(peer) else {}
out = f"{d}.json"
json.dump({"time": stamp, "threads": threads, "llama_cpp_build": build, "files": entries}, open(out, "w"), indent=1)
print(f"\nwrote {out} (raw llama-bench and ours JSON in {d}/)")
PY
