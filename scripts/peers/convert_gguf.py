"""Dequantizes the toolkit's SmolLM2-135M-Instruct Q4_1 GGUF into an fp32 Hugging Face folder,
the base model of the PyTorch/PEFT peer and of the reference fixtures (scripts/fixtures/).
Leaves out any other model or dtype; nothing is fetched here (setup.sh passes the file that
scripts/fetch-model.sh verified). Follows transformers' own GGUF loader (from_pretrained with
gguf_file=), so the weights are what a transformers user gets from the same file.

Usage: python convert_gguf.py FILE.gguf OUT_DIR    (OUT_DIR appears only once it is complete)
"""
import json
import os
import shutil
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

if len(sys.argv) != 3:
    sys.exit(__doc__)
gguf_path, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
gdir, gname = os.path.split(gguf_path)
partial = out + ".partial"
shutil.rmtree(partial, ignore_errors=True)

t0 = time.time()
tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
print(f"loaded+dequantized in {time.time()-t0:.1f}s")
print(model.config)
print("params:", sum(p.numel() for p in model.parameters()))
print("tied embeddings:", model.config.tie_word_embeddings,
      model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr())
# transformers 5.x marks a GGUF-loaded model as "quantized with gguf" and refuses
# save_pretrained(); the weights are already plain fp32 tensors, so copy them into a
# fresh model built from the same config without the quantization_config.
cfg = model.config.to_dict()
cfg.pop("quantization_config", None)
cfg.pop("_model_name_or_path", None)
clean = LlamaForCausalLM(LlamaConfig(**cfg)).to(torch.float32)
missing, unexpected = clean.load_state_dict(model.state_dict(), strict=False)
print("missing:", missing, "unexpected:", unexpected)
clean.tie_weights()
assert torch.equal(clean.lm_head.weight, model.lm_head.weight)
clean.generation_config = model.generation_config
clean.save_pretrained(partial, safe_serialization=True)
tok.save_pretrained(partial)
# transformers 5.x writes RoPE base only as "rope_parameters": {"rope_theta": ...}.
# Older readers (mlx_lm 0.32 llama.py) look for a top-level "rope_theta" and silently
# default to 10000 if it is missing, so write it explicitly too.
cp = os.path.join(partial, "config.json")
with open(cp) as f:
    c = json.load(f)
c["rope_theta"] = c.get("rope_parameters", {}).get("rope_theta", 100000.0)
with open(cp, "w") as f:
    json.dump(c, f, indent=2)
print("rope_theta written:", c["rope_theta"])
# A half-written folder must not look finished to setup.sh's check, so it is renamed last.
shutil.rmtree(out, ignore_errors=True)
os.replace(partial, out)
print("saved to", out)
