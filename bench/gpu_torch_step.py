#!/usr/bin/env python3
"""GPT-2 small's bf16 training step in PyTorch, against a dtc run's log.

Usage (on the GPU machine, by the bundle's check.sh; scripts/gpu_bundle.sh):
    python3 gpu_torch_step.py DTC_LOG.jsonl [--batch 8] [--steps 13] [--peak FLOP/s]

Times transformers' GPT2LMHeadModel with GPT-2 small's shape (12 layers,
hidden 768, 12 heads, sequence 1024, vocabulary 50257; random weights)
training under torch.autocast(bfloat16) with AdamW, eager and (where it
works) torch.compile, on random tokens; reads the per-step seconds of a
`dtc run --log-json` of the same shapes (dtc's own generated GPT, bf16);
prints each one's median ms per step after 3 warm-up steps, tokens/s and
model FLOPs utilisation (6 N T + 12 L H S T FLOPs a step: N parameters, T
tokens; PyTorch's N for both), and dtc's throughput over PyTorch eager's.
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
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import torch
    import transformers
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, vocab_size=VOCAB, n_positions=SEQ,
        use_cache=False, tie_word_embeddings=False, attn_pdrop=0.0, embd_pdrop=0.0,
        resid_pdrop=0.0)).cuda().train()
    params = sum(p.numel() for p in model.parameters())
    tokens = args.batch * SEQ
    flops = 6 * params * tokens + 12 * LAYERS * HIDDEN * SEQ * tokens
    g = torch.Generator(device="cuda").manual_seed(1)
    batches = [tuple(torch.randint(0, VOCAB, (args.batch, SEQ), device="cuda", generator=g)
                     for _ in range(2)) for _ in range(4)]
    print(f"GPT-2 small shape ({params / 1e6:.1f} M parameters), batch {args.batch} x {SEQ} "
          f"tokens, bf16 training, on {torch.cuda.get_device_name()} (torch "
          f"{torch.__version__}); medians after {WARMUP} warm-up steps")

    def line(what, ms):
        m = statistics.median(ms[WARMUP:])
        print(f"  {what:24s} {m:9.2f} ms  {tokens / m * 1e3:10.0f} tokens/s  "
              f"MFU {flops / (m / 1e3) / args.peak * 100:5.1f}%")
        return m

    with open(args.dtc_log) as f:
        dtc = [json.loads(l)["seconds"] * 1e3 for l in f if l.strip()]
    if len(dtc) <= WARMUP:
        raise SystemExit(f"{args.dtc_log}: {len(dtc)} steps, need more than {WARMUP}")
    dtc_ms = line("dtc (CUDA backend)", dtc)
    eager = line("PyTorch eager", train_steps(model, batches, args.steps, False)[1])
    try:
        line("PyTorch torch.compile", train_steps(model, batches, args.steps, True)[1])
    except Exception as e:  # noqa: BLE001 - compile failures are reported, not fatal
        print(f"  torch.compile did not run: {type(e).__name__}: {str(e)[:200]}")
    print(f"dtc's throughput over PyTorch eager's: {eager / dtc_ms:.2f}x "
          f"(floor 1.0x); dtc's MFU {flops / (dtc_ms / 1e3) / args.peak * 100:.1f}% (floor 40%)")


if __name__ == "__main__":
    main()
