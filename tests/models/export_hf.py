#!/usr/bin/env python3
"""Exports tiny Hugging Face models with PyTorch's default ONNX exporter.

    python3 tests/models/export_hf.py tests/models/exported

Writes gpt2.onnx, bert.onnx, vit.onnx and resnet.onnx (each with its
.onnx.data, external weights as the exporter writes them): transformers'
GPT2LMHeadModel, BertModel, ViTModel and ResNetModel with their default
settings but tiny sizes and random weights (seed 0),
exported by `torch.onnx.export(..., dynamo=True)` (the default exporter of
current torch) with a dynamic batch axis. These are the committed fixtures
of tests/models/exported_models.py; CI does not need torch to use them.
Needs torch, transformers and onnxscript (pip).
"""
import argparse
import os
import warnings

import torch
import transformers


def export(model, args, names, path):
    batch = torch.export.Dim("batch")
    shapes = {name: {0: batch} for name in names}
    torch.onnx.export(model, args, path, input_names=names, dynamo=True,
                      dynamic_shapes=shapes if len(names) > 1 else ({0: batch},))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False)).eval()
    export(gpt2, (torch.randint(0, 64, (2, 8)),), ["input_ids"], os.path.join(out, "gpt2.onnx"))
    bert = transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
        vocab_size=64, max_position_embeddings=16)).eval()
    export(bert, (torch.randint(0, 64, (2, 8)), torch.ones(2, 8, dtype=torch.long)),
           ["input_ids", "attention_mask"], os.path.join(out, "bert.onnx"))
    vit = transformers.ViTModel(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, num_channels=3)).eval()
    export(vit, (torch.randn(2, 3, 32, 32),), ["pixel_values"], os.path.join(out, "vit.onnx"))
    resnet = transformers.ResNetModel(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
        num_channels=3)).eval()
    export(resnet, (torch.randn(2, 3, 32, 32),), ["pixel_values"],
           os.path.join(out, "resnet.onnx"))
    print("torch", torch.__version__, "transformers", transformers.__version__)


if __name__ == "__main__":
    main()
