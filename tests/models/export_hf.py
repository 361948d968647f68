#!/usr/bin/env python3
"""Exports tiny Hugging Face models with PyTorch's default ONNX exporter.

    python3 tests/models/export_hf.py tests/models/exported

Writes gpt2.onnx, llama.onnx, bert.onnx, vit.onnx, resnet.onnx, minilm.onnx
and vit_packaged.onnx (each with
its .onnx.data, external weights as the exporter writes them): transformers'
GPT2LMHeadModel, LlamaForCausalLM, BertModel, ViTModel and ResNetModel with
their default settings but tiny sizes and random weights (seed 0), exported
by `torch.onnx.export(..., dynamo=True)` (the default exporter of current
torch) with a dynamic batch axis (Llama: static, batch 2 and 16 tokens, and
llama_dynamic.onnx with dynamic batch and sequence), and vit_legacy.onnx by
the older exporter (dynamo=False). minilm.onnx is a sentence-embedding model
as sentence-transformers packages one (mean pooling, L2 normalisation;
dynamic batch and sequence), vit_packaged.onnx (and vit_packaged_legacy.onnx
by the older exporter) a ViT classifier called with
interpolate_pos_encoding=True. bart.onnx (BartModel), whisper_audio.onnx
(WhisperForAudioClassification on 8 mel bins) and mistral.onnx
(MistralForCausalLM, sliding window 4) have a dynamic batch too.
gpt2_heads.onnx is a GPT-2 of 4 heads and 32 tokens, wide enough that
tensor-parallel plans split its attention by heads (`--only gpt2_heads`
writes it alone).
For GPT-2, GPT-2 with heads and Llama, <name>_train/ holds three batches of token ids and the
losses PyTorch's AdamW reaches on them, which CI replays with dtc. These are the committed fixtures
of tests/tools-cli/exported_models.test; CI does not need torch to use them.
Needs torch, transformers and onnxscript (pip).
"""
import argparse
import contextlib
import copy
import io
import json
import os
import warnings

import numpy as np

import torch
import transformers


def export(model, args, names, path):
    batch = torch.export.Dim("batch")
    shapes = {name: {0: batch} for name in names}
    torch.onnx.export(model, args, path, input_names=names, dynamo=True,
                      dynamic_shapes=shapes if len(names) > 1 else ({0: batch},))


class SentenceEmbedding(torch.nn.Module):
    """A sentence-embedding MiniLM as sentence-transformers packages one
    (all-MiniLM-L6-v2's modules): BERT, mean pooling over the attention
    mask, L2 normalisation (ReduceL2). Outputs the token embeddings first,
    then the sentence embedding."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                           token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
        pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return tokens, torch.nn.functional.normalize(pooled, p=2, dim=1)


class PackagedVit(torch.nn.Module):
    """A ViT classifier packaged for any image size, as pipelines call it:
    interpolate_pos_encoding=True, so the position table goes through a
    bicubic Resize whose size is computed from constants (Pow(n, 0.5))."""

    def __init__(self, vit):
        super().__init__()
        self.vit = vit

    def forward(self, pixel_values):
        return self.vit(pixel_values=pixel_values, interpolate_pos_encoding=True).logits


def settle(model):
    """Random values for the weights initialised to constants (norm scales of
    ones, zero biases): a model mid-training, as a user would export one.
    Equal initial values would be merged into one initializer by the
    exporter's optimizer, and then trained as one tensor."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
    return model


def record_training(model, name, out, batch, seq, vocab, steps=4, lr=1e-2):
    """Trains `model` with AdamW (no weight decay) on next-token ids, a batch
    of `batch` after another, and writes what dtc's CI test replays:
    <name>_train/input_ids.npy, labels.npy and losses.json (PyTorch's)."""
    directory = os.path.join(out, name + "_train")
    os.makedirs(directory, exist_ok=True)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (batch * steps, seq + 1), generator=generator)
    ids, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    np.save(os.path.join(directory, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(directory, "labels.npy"), labels.numpy())
    model = copy.deepcopy(model).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, eps=1e-8)
    losses = []
    for step in range(steps):
        rows = slice(step * batch, (step + 1) * batch)
        logits = model(ids[rows]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), labels[rows].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with open(os.path.join(directory, "losses.json"), "w") as f:
        json.dump({"lr": lr, "batch": batch, "losses": losses}, f, indent=1)
        f.write("\n")


def export_gpt2_heads(out):
    """GPT-2 with 4 heads of 16 over 32 tokens: `dtc compile --tp 2` splits
    its attention (and c_attn, by heads) over the ranks."""
    torch.manual_seed(0)
    gpt2 = settle(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=64, n_head=4, vocab_size=128, n_positions=32, use_cache=False,
        attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0))).eval()
    export(gpt2, (torch.randint(0, 128, (4, 32)),), ["input_ids"],
           os.path.join(out, "gpt2_heads.onnx"))
    record_training(gpt2, "gpt2_heads", out, batch=4, seq=32, vocab=128)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--only", choices=["gpt2_heads"], help="write this model alone")
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    warnings.filterwarnings("ignore")
    if args.only:
        export_gpt2_heads(out)
        return
    # Tied embeddings (GPT-2's default): the exporter folds lm_head's
    # transpose into an initializer of its own, which dtc ties again.
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    gpt2 = settle(transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False,
        attn_pdrop=0.0, embd_pdrop=0.0, resid_pdrop=0.0))).eval()
    export(gpt2, (torch.randint(0, 64, (2, 8)),), ["input_ids"], os.path.join(out, "gpt2.onnx"))
    record_training(gpt2, "gpt2", out, batch=2, seq=8, vocab=64)
    # Llama with a static shape: the exporter stores the causal mask and the
    # rotary cos/sin tables as initializers, which training must not touch.
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    llama = settle(transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        use_cache=False))).eval()
    torch.onnx.export(llama, (torch.randint(0, 64, (2, 16)),), os.path.join(out, "llama.onnx"),
                      input_names=["input_ids"], output_names=["logits"], dynamo=True)
    record_training(llama, "llama", out, batch=2, seq=16, vocab=64)
    # And with a dynamic batch and sequence: the rotary tables are computed
    # at run time (Range, Sin, Cos), the causal mask too.
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", min=2, max=64)
    torch.onnx.export(llama, (torch.randint(0, 64, (2, 16)),),
                      os.path.join(out, "llama_dynamic.onnx"), input_names=["input_ids"],
                      output_names=["logits"], dynamo=True,
                      dynamic_shapes=({0: batch, 1: seq},))
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    bert = transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
        vocab_size=64, max_position_embeddings=16)).eval()
    export(bert, (torch.randint(0, 64, (2, 8)), torch.ones(2, 8, dtype=torch.long)),
           ["input_ids", "attention_mask"], os.path.join(out, "bert.onnx"))
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    vit = transformers.ViTModel(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, num_channels=3)).eval()
    export(vit, (torch.randn(2, 3, 32, 32),), ["pixel_values"], os.path.join(out, "vit.onnx"))
    # The older TorchScript exporter too (dynamo=False; with this
    # transformers it fails on GPT-2, Llama and BERT: aten::diff, use_cache):
    # Shape/Gather shape arithmetic, GELU written out with Erf.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(vit, (torch.randn(2, 3, 32, 32),), os.path.join(out, "vit_legacy.onnx"),
                          dynamo=False, opset_version=17, input_names=["pixel_values"],
                          dynamic_axes={"pixel_values": {0: "batch"}})
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    resnet = transformers.ResNetModel(transformers.ResNetConfig(
        embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic",
        num_channels=3)).eval()
    export(resnet, (torch.randn(2, 3, 32, 32),), ["pixel_values"],
           os.path.join(out, "resnet.onnx"))
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    minilm = SentenceEmbedding(transformers.BertModel(transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
        vocab_size=64, max_position_embeddings=16), add_pooling_layer=False)).eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    tokens = (torch.randint(0, 64, (2, 8)), torch.ones(2, 8, dtype=torch.long),
              torch.zeros(2, 8, dtype=torch.long))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", min=2, max=16)
    torch.onnx.export(minilm, tokens, os.path.join(out, "minilm.onnx"), input_names=names,
                      output_names=["token_embeddings", "sentence_embedding"], dynamo=True,
                      dynamic_shapes=tuple({0: batch, 1: seq} for _ in names))
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    packaged = PackagedVit(transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        image_size=32, patch_size=8, num_channels=3, num_labels=5))).eval()
    export(packaged, (torch.randn(2, 3, 32, 32),), ["pixel_values"],
           os.path.join(out, "vit_packaged.onnx"))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(packaged, (torch.randn(2, 3, 32, 32),),
                          os.path.join(out, "vit_packaged_legacy.onnx"), dynamo=False,
                          opset_version=17, input_names=["pixel_values"],
                          output_names=["logits"], dynamic_axes={"pixel_values": {0: "batch"}})
    # Encoder-decoder, audio and sliding-window models: BART's decoder
    # inputs are its input ids shifted right (ScatterND, ScatterElements),
    # Whisper's encoder convolves log-mel frames, Mistral's attention keeps
    # a sliding window.
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    bart = transformers.BartModel(transformers.BartConfig(
        vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=16, use_cache=False)).eval()
    export(bart, (torch.randint(0, 64, (2, 8)),), ["input_ids"], os.path.join(out, "bart.onnx"))
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    whisper = transformers.WhisperForAudioClassification(transformers.WhisperConfig(
        vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
        max_source_positions=16, num_labels=3)).eval()
    export(whisper, (torch.randn(2, 8, 32),), ["input_features"],
           os.path.join(out, "whisper_audio.onnx"))
    torch.manual_seed(0)  # each model's weights whatever is exported before it
    mistral = transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        sliding_window=4, use_cache=False)).eval()
    export(mistral, (torch.randint(0, 64, (2, 8)),), ["input_ids"],
           os.path.join(out, "mistral.onnx"))
    export_gpt2_heads(out)
    print("torch", torch.__version__, "transformers", transformers.__version__)


if __name__ == "__main__":
    main()
