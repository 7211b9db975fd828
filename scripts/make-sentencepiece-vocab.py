#!/usr/bin/env python3
"""A 262,144-piece SentencePiece-BPE-shaped vocabulary (Gemma 3's size) for timing only, not for
correctness: byte tokens <0x00>-<0xFF>, control tokens (<pad> <eos> <bos> <unk> <start_of_turn>
<end_of_turn>), single characters (ASCII, Latin, 3,000 CJK), then pieces grown as two earlier pieces
joined (so every piece has a merge path), scores descending as a trained model's are. Written as a
tokenizer-only GGUF (tokenizer.ggml.model "llama", add_space_prefix false as Gemma's) with gguf-py.

Usage: python scripts/make-sentencepiece-vocab.py OUT.gguf   (peer venv: gguf)
Then:  bench guidance --model OUT.gguf --data examples/extraction/train.jsonl
"""
import random
import sys

import gguf
random.seed(1)
N = 262144
tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
types = [3, 3, 3, 2, 3, 3]
for b in range(256):
    tokens.append(f"<0x{b:02X}>"); types.append(6)
chars = list("▁abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"()[]{}<>-_/\\@#$%^&*+=|~`\n\t") + [chr(c) for c in range(0xC0, 0x250)] + [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
seen = set(tokens)
for c in chars:
    if c not in seen:
        seen.add(c); tokens.append(c); types.append(1)
pieces = [t for t, ty in zip(tokens, types) if ty == 1]
letters = [c for c in chars if c.isalpha() and ord(c) < 0x250]
while len(tokens) < N:
    # grow: a word-ish piece from a frequent short piece and a letter / short piece
    a = random.choice(pieces[-20000:] if len(pieces) > 20000 and random.random() < 0.5 else pieces)
    if len(a) > 14: continue
    b = random.choice(letters) if random.random() < 0.7 else random.choice(pieces[: min(len(pieces), 3000)])
    if random.random() < 0.3 and not a.startswith("▁"): a = "▁" + a if "▁" + a in seen else a
    t = a + b
    if t in seen or len(t) > 16: continue
    seen.add(t); tokens.append(t); types.append(1); pieces.append(t)
scores = [0.0 if ty != 1 else -float(i) for i, ty in enumerate(types)]
w = gguf.GGUFWriter(sys.argv[1] if len(sys.argv) > 1 else "sp262k.gguf", "llama")
w.add_tokenizer_model("llama"); w.add_tokenizer_pre("default")
w.add_token_list(tokens); w.add_token_scores(scores); w.add_token_types(types)
w.add_bos_token_id(2); w.add_eos_token_id(1); w.add_unk_token_id(3); w.add_pad_token_id(0)
w.add_add_space_prefix(False)
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print(len(tokens))
