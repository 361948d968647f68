#!/usr/bin/env python3
"""GPT-2 small's bf16 training step in PyTorch, against a dtc run's log.

Usage (on the GPU machine, by the bundle's check.sh; scripts/gpu_bundle.sh):
    python3 gpu_torch_step.py DTC_LOG.jsonl [--batch 8] [--steps 13] [--peak FLOP/s]
                              [--dtc-only]

Times transformers' GPT2LMHeadModel with GPT-2 small's shape (12 layers,
hidden 768, 12 heads, sequence 1024, vocabulary 50257; random weights)
training under torch.autocast(bfloat16) with AdamW, eager and (where it
works) torch.compile, on random tokens; reads the per-step seconds of a
`dtc run --log-json` of the same shapes (dtc's own generated GPT, bf16);
prints each one's median ms per step after 3 warm-up steps, tokens/s and
model FLOPs utilisation (6 N T + 12 L H S T FLOPs a step: N parameters, T
tokens; PyTorch's N for both), and dtc's throughput over PyTorch eager's.
dtc's line comes first and stands without PyTorch (its import failing
ends the script after it); torch.compile, the slowest to start, last.
The issue's floors: at least 1.0x eager and 40% MFU.
"""

import argparse
import json
import statistics
import time
import warnings

LAYERS, HIDDEN, HEADS, VOCAB, SEQ = 12, 768, 12, 50257, 1024
WARMUP = 3


def train_steps(model, batches, steps, compiled):
    """PyTorch's bf16 training steps (autocast, AdamW) over `batches` ((ids,
    labels) pairs on the GPU, in turn): each step's loss and milliseconds."""
    import torch
    model = model.cuda().train()
    step_model = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    losses, ms = [], []
    for step in range(steps):
        x, y = batches[step % len(batches)]
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_model(x).logits
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB),
                                                     y.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - start) * 1e3)
        losses.append(loss.item())
    return losses, ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dtc_log")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=13, help="steps, warm-up included")
    ap.add_argument("--peak", type=float, default=989e12, help="bf16 dense FLOP/s")
    ap.add_argument("--dtc-only", action="store_true", help="dtc's figures alone")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    # transformers' GPT2LMHeadModel, untied: embeddings (token, position),
    # per layer two norms and four linear layers (12 H^2 + 13 H), the final
    # norm and the head. Checked against PyTorch's count below.
    params = (2 * VOCAB * HIDDEN + SEQ * HIDDEN + LAYERS * (12 * HIDDEN**2 + 13 * HIDDEN)
              + 2 * HIDDEN)
    tokens = args.batch * SEQ
    flops = 6 * params * tokens + 12 * LAYERS * HIDDEN * SEQ * tokens

    def line(what, ms):
        m = statistics.median(ms[WARMUP:])
        print(f"  {what:24s} {m:9.2f} ms  {tokens / m * 1e3:10.0f} tokens/s  "
              f"MFU {flops / (m / 1e3) / args.peak * 100:5.1f}%", flush=True)
        return m

    # dtc's figures first: they stand without PyTorch.
    with open(args.dtc_log) as f:
        dtc = [json.loads(l)["seconds"] * 1e3 for l in f if l.strip()]
    if len(dtc) <= WARMUP:
        raise SystemExit(f"{args.dtc_log}: {len(dtc)} steps, need more than {WARMUP}")
    print(f"GPT-2 small shape ({params / 1e6:.1f} M parameters), batch {args.batch} x {SEQ} "
          f"tokens, bf16 training; medians after {WARMUP} warm-up steps", flush=True)
    dtc_ms = line("dtc (CUDA backend)", dtc)
    print(f"dtc's MFU {flops / (dtc_ms / 1e3) / args.peak * 100:.1f}% (floor 40%)", flush=True)
    if args.dtc_only:
        return
    try:
        pytorch(args, params, tokens, line, dtc_ms)
    except Exception as e:  # noqa: BLE001 - dtc's figures are out; say why PyTorch's are not
        raise SystemExit(f"PyTorch's side did not run: {type(e).__name__}: {str(e)[:300]}")


def pytorch(args, params, tokens, line, dtc_ms):
    """PyTorch's eager (then compiled) steps of the same shapes, after dtc's."""
    import torch
    import transformers
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=VOCAB, n_positions=SEQ,
        use_cache=False, tie_word_embeddings=False, attn_pdrop=0.0, embd_pdrop=0.0,
        resid_pdrop=0.0)).cuda().train()
    counted = sum(p.numel() for p in model.parameters())
    if counted != params:
        print(f"  (PyTorch counts {counted} parameters, this script {params}: MFU uses "
              f"{params})")
    g = torch.Generator(device="cuda").manual_seed(1)
    batches = [tuple(torch.randint(0, VOCAB, (args.batch, SEQ), device="cuda", generator=g)
                     for _ in range(2)) for _ in range(4)]
    print(f"  on {torch.cuda.get_device_name()} (torch {torch.__version__})", flush=True)
    eager = line("PyTorch eager", train_steps(model, batches, args.steps, False)[1])
    print(f"dtc's throughput over PyTorch eager's: {eager / dtc_ms:.2f}x (floor 1.0x)",
          flush=True)
    try:
        line("PyTorch torch.compile", train_steps(model, batches, args.steps, True)[1])
    except Exception as e:  # noqa: BLE001 - compile failures are reported, not fatal
        print(f"  torch.compile did not run: {type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    main()
