//===- dtc.cpp - the dtc command line -------------------------------------===//
//
// dtc COMMAND [options]; see `dtc --help`. Errors are printed for people and
// exit with status 1; nothing here aborts on user input.
//
//===----------------------------------------------------------------------===//
#include "plan/Version.h"
#include "tools/dtc/Commands.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>

namespace dtc::cli {
namespace {

constexpr const char *kUsage = R"(dtc: compile ONNX models into distributed training plans

usage: dtc COMMAND [options]

commands:
  compile MODEL.onnx -o PLAN.dtcp [--shape NAME=DIMS]... [--freeze NAME=FILE.pb]...
        Compile a model into a plan: elementwise fusion, a memory-aware
        schedule, buffer assignment with reuse. Prints what it decided.
        --shape, --freeze, --trainable and --frozen as for import.
        --train makes the plan one training step (forward, loss, backward,
        optimizer update) on the model's first output:
          --train-output NAME   train this output instead of the first
          --trainable PATTERN / --frozen PATTERN   which weights train (as
              for import; the notes list those left alone and why)
          --loss cross_entropy|mse (default cross_entropy; labels are class
              ids, --ignore-index N leaves a label out of the loss)
          --optimizer adamw|sgd (default adamw) --lr X (default 1e-3)
          --momentum X (sgd, default 0.9) --beta1 X --beta2 X --weight-decay X
          --clip-norm X (global gradient norm; default off)
          --skip-nonfinite   a step whose gradients are not finite (an
              overflow, a bad sample) leaves weights and optimizer state as
              they were and the run goes on, saying so (default: a
              non-finite loss stops the run)
          --lr-schedule constant|cosine --warmup N --total-steps N
              (--schedule constant|cosine too)
          --precision fp32|bf16 (bf16: the model computes in bf16,
              fp32 master weights, optimizer state and loss)
          --pad-classes N   a cross-entropy's vocabulary (32 N classes or
              more) padded to a multiple of N, the padding masked out of the
              loss, so tensor parallelism can split it (default 128; 0: as
              the model has it; exports keep the model's shapes)
          --micro-batches N   gradient accumulation: each step runs the
              model on N micro-batches of batch/N samples, sums their
              gradients and updates once (the data-parallel reduction too);
              default 1, or for a pipeline the most that give each
              data-parallel rank a sample (chosen per searched stage count)
          --recompute none|selective|full|auto   recompute activations in
              the backward instead of keeping them: selective = attention's
              scores and softmax, full = all but each layer's input; auto
              (default) = the first of none, selective, full whose plan fits,
              or the next one's if that predicts a faster step when the
              first fills the device
        --precision fp32|bf16 without --train: an inference plan computing in
            bf16 (activations stored in bf16, weights cast once at load,
            its outputs cast back to the model's types)
        --attention fused|unfused   fused (default): attention written out
            in ops (scores, scale, a mask or bias, softmax, values) is one
            op, flash style, that keeps no scores (a causal mask skips the
            hidden tiles; a padding mask read from inputs, or any other,
            is added as a bias); unfused leaves the ops as written
        MODEL may also be a generated GPT without weights:
          gpt:layers=L,hidden=H,heads=A,seq=S,vocab=V,batch=B
        Splitting the work over several devices (searched with COIN-OR CBC
        to minimise the predicted step time under each device's memory):
          --devices N | --mesh AxB[xC]   devices, or a mesh of them; every
              axis's role (data, tensor, ZeRO, sequence) is searched (a
              --mesh's devices as one axis too), and for --devices the
              mesh's shape too (one axis, or dp x tp with tensor-parallel
              groups inside a node) and, for --train without --pp, the
              number of pipeline stages; for --train the pick is simulated
              beside plain data parallelism and the faster kept
          --dp N --tp N   pin a data-parallel / tensor-parallel axis (the
              rest of --devices or --mesh, if any, is still searched)
          --zero 0|1|2|3   pin optimizer-state (1-2) or weight (3) sharding
              over dp (default: searched)
          --no-sequence-parallel   tensor-parallel axes keep activations
              whole along the sequence (layer norms, residuals, the loss),
              as Megatron-LM did before 2022 (default: searched)
          --backend cpu|cuda   cuda: every elementwise group also as a GPU
              kernel generated through MLIR (PTX for sm_80 and sm_90, in the
              plan; dtc plan --ptx DIR writes them)
          --sync allreduce|local|federated|ps|auto   how data-parallel ranks combine
              their work: allreduce (default) sums the gradients every step;
              local (local SGD) lets each rank train its own replica on its
              part of the batch and averages the weights every
              --average-every H steps (default 4) and at the end;
              federated: each data-parallel rank a client with its own data,
              averaged after each round (dtc run --rounds); ps: parameter
              servers, --servers K ranks past the mesh (default 1) hold the
              weights and optimizer state, the data-parallel ranks push
              gradients and pull weights; --staleness S > 0 makes it
              asynchronous, a worker at most S steps ahead of the slowest
              (default 0: synchronous, the all-reduce step's result); all
              need --dp N, whole weights (--zero 0) and no pipeline; auto
              compiles the all-reduce and what --servers K / --average-every
              H allow (parameter servers / local SGD), simulates each on the
              cluster and keeps the fastest
          --compress-gradients bf16|f16|powersgd[:R]   weight gradients'
              reductions travel in bf16 (or f16) between casts: half the
              bytes, losses within about 1e-3; or as PowerSGD's two rank-R
              factors (default R 2) with error feedback (default: f32);
              auto: whichever of f32, bf16 and powersgd:4 predicts the
              fastest step (each compiled and simulated)
          --pp N   pipeline stages: the step cut between layers into N
              stages, each on its own copy of
              the rest of the mesh: ranks = N x dp x tp; use with
              --micro-batches M (M >= N keeps the bubble small); --pp 0
              with --devices: searched (the default with --train)
          --schedule gpipe|1f1b|interleaved   the stages' order of
              micro-batches (default 1f1b: at most N in flight on the first
              stage; interleaved: 1f1b with each stage running several
              chunks of layers, a smaller bubble for more transfers;
              needs M a multiple of N)
          --virtual-stages V   interleaved: V chunks per stage (default 2)
          --stage-replicas R0,R1,...   stage s on Rs copies of the stage
              mesh, each running every Rs-th micro-batch (a costlier
              stage on more devices); ranks = (R0 + R1 + ...) x dp x tp
          --stage-cuts costs|flops   where stages end: where the cost
              model predicts the shortest step, each stage's memory within
              the device (default), or where forward FLOPs even out
          --memory-limit SIZE   per device, like 40GiB (default: the
              cluster's device memory)
          --bucket SIZE   collectives of one group (gradient reductions,
              weight gathers) sent together, up to SIZE of input a message
              (default 25MiB; 0: each on its own)
          --preset cpu-local|a100-80g|h100-sxm | --cluster FILE.json
              the cluster the plan is costed on (default cpu-local)

  plan PLAN.dtcp [-o FILE] [--full | --json | --explain | --html PAGE.html | --ptx DIR]
        Show a plan on a screen or two: mesh, pipeline, training, the
        parameters with repeated layers collapsed ("h.*.attn.q.weight ...
        * = 0-95") and how each is split, communication per step by kind,
        memory per rank, the step simulated on the plan's cluster, and every
        decision the compiler made. --full adds inputs, outputs and each
        rank's instructions and buffers; --json writes the summary, every
        parameter listed, as JSON (docs/plan-summary.md: the schema);
        --ptx DIR writes the GPU kernels of a plan compiled with --backend
        cuda, one NAME.<chip>.ptx per kernel and chip;
        --explain what the search compared and why this plan won (mesh
        shapes and roles with their predicted steps, pipeline stage counts,
        micro-batches, recomputation, memory);
        --html writes one self-contained page: the summary, a memory bar
        per rank, the simulated step's timeline per rank and stream, the
        parameters in a table to filter, communication and decisions.

  run PLAN.dtcp [-n RANKS] [--inputs DIR] [--outputs DIR] [--threads N]
                [--model MODEL.onnx] [--output-format pb|npy] [--repeat N] [--profile]
                [--trace FILE.json] [--check [--rtol X] [--atol X]] [--backend cpu|cuda]
        Run a plan on this machine's CPU (--backend cuda: on its NVIDIA
        GPUs, one rank per GPU, for a plan compiled with --backend cuda; it
        says what is missing when the plan or the machine lacks it, and
        which instructions run on the host). Inputs are read from DIR as
        input_<i>.pb / input_<i>.npy (ONNX test-suite layout) or
        <name>.pb / <name>.npy; outputs are written as output_<i>.pb (or
        .npy). In an ONNX test-data folder, output_<i>.pb beside the inputs
        are the expected outputs: --check compares each output against
        its own (|got - want| <= atol + rtol |want|, --rtol default 1e-3,
        --atol 1e-5; integers exactly), prints the error and exits 1 when
        one differs. --threads defaults to all cores (shared by the ranks).
        --model overrides where the parameters are read from (default: the
        model the plan was compiled from). --repeat N runs N more times and
        prints the latency (on several ranks, until the last rank is done).
        --profile times every instruction (over the --repeat runs, else one
        more run) and prints where the time went (on several ranks, each
        instruction's slowest rank). --trace FILE.json writes the measured
        step (training too) as a Chrome trace in the format of simulate
        --trace: every rank's instructions in order, each its median time.
        A plan for several ranks runs one process per rank: dtc starts them
        with mpirun (-n, if given, must be the plan's rank count), or joins
        as one rank when mpirun or srun started it. Rank 0 prints and writes
        the outputs. Ranks that fit on the machine's cores and were not
        bound by their launcher bind themselves to cores of their own.

  run TRAIN.dtcp --data DIR|TOKENS.bin --steps N [--seed S] [--no-shuffle]
                 [--token-bytes 2|4] [--checkpoint DIR [--checkpoint-every K]]
                 [--resume] [--max-restarts N] [--timeout SECONDS]
                 [--export OUT.onnx] [--threads N]
                 [--model MODEL.onnx] [--log-json LOG.jsonl]
        Train with a plan compiled with --train. --data DIR holds one
        <input>.npy per model input and labels.npy (first dim: samples);
        TOKENS.bin is a flat file of uint16 (or --token-bytes 4: uint32)
        token ids, cut into sequences of the compiled length. Batches are
        shuffled per epoch with --seed (default 0). Prints a line per step
        ("step N loss X lr Y time Z ms", then tokens or samples per second,
        FLOP/s and their share of the device's peak, steps done, time spent
        and left), on a terminal in place; --log-json writes the same as a
        JSON record per step (appended when resuming). --checkpoint DIR
        writes weights, optimizer state and data position atomically every
        K steps and at the end, with CRC-32C checksums (one file per rank
        when several run; the replaced file kept as FILE.previous);
        --resume goes on from it exactly, falling back to the previous one
        when the last is damaged (and saying so). --max-restarts N: when
        the run ends abnormally (a rank killed or crashed), start all ranks
        again from the last checkpoint, up to N times; an error every rank
        reports alike is not retried. --timeout SECONDS (default 600; 0:
        none): a rank that waits longer on the others (one stopped or
        frozen) ends the job, naming the rank that stopped.
        --export writes the model with trained weights (weights split over
        the ranks are gathered first; frozen ones as they were); a model
        with external data gets OUT.onnx.data beside OUT.onnx, so it loads
        from any folder.

  run FED.dtcp --data DIR --rounds R [--local-epochs E] [--clients-per-round K]
               [--secure-aggregation] [--lose-update CLIENT@ROUND] [--seed S]
               [--checkpoint DIR [--checkpoint-every K] [--resume]]
               [--export OUT.onnx] [--threads N]
        Federated averaging with a plan compiled with --sync federated:
        client c (its data-parallel rank) trains on DIR/c, E local epochs a
        round (default 1) from the global model; after each round the
        weights become the clients' mean weighted by their samples. K
        clients drawn a round from the seed (default all);
        --secure-aggregation sends masked fixed-point sums whose pairwise
        masks cancel; --lose-update drops that client's update of that
        round (testing a client that drops out). A line per round.
        --checkpoint writes every K rounds and at the end; --resume goes on
        after the checkpoint's round.

  simulate PLAN.dtcp [--preset cpu-local|a100-80g|h100-sxm | --cluster FILE.json]
                     [--nodes N] [--trace TRACE.json] [--every-rank]
                     [--no-communication-stream] [--compare-trace RUN.json]
        Predict one step of the plan on a cluster (default: the one the plan
        was compiled for, with as many nodes as its ranks need): step time, throughput, model FLOP/s per device, memory
        peak per rank, compute/communication/idle time, time by op class.
        Each instruction is a roofline of its FLOPs and bytes; --trace
        writes the timeline for ui.perfetto.dev (one rank for each set of
        ranks alike, such as a pipeline stage's; --every-rank simulates and
        writes each rank, slower, the same figures); --nodes N simulates the
        cluster with N nodes of the same machines; --no-communication-stream
        makes each collective and transfer wait on the compute stream, as a
        runtime without a communication stream runs them (Megatron-LM's of
        2021; the cluster's communication_stream: false); --compare-trace
        sets the simulation beside dtc run --trace's measured timeline of
        the same plan: per op class, measured and simulated, and the
        instructions furthest apart. Cluster files: docs/cluster.md.

  calibrate [-o CLUSTER.json] [--quick] [--no-links]
        Measure this machine, one core per device, with the kernels plans
        run: sgemm and convolution rates, memory bandwidth, the per-kernel
        floor, cache levels, and the link between ranks and their jitter
        (all-gathers among one rank per core, started with mpirun, timed as
        a training step meets them; --no-links keeps cpu-local's); write a
        cluster file (default: stdout) for dtc simulate.

  report LOG.jsonl [--html PAGE.html]
        Read the per-step log of dtc run --log-json: where the run went
        (first and last loss, throughput); --html draws the loss and the
        throughput over the steps on one self-contained page.

  checkpoint inspect DIR
        List the checkpoint files of dtc run --checkpoint DIR (each rank's
        last and the previous it replaced): step, tensors, size, the dtc
        and plan that wrote it, each verified (framing, version, CRC-32C
        checksums of the file and of every tensor); and the step a resume
        starts from. Exit status 1 when a file is damaged.

  checkpoint convert DIR --plan PLAN.dtcp -o OUT
        Rewrite the checkpoint in DIR, written under one split of a model,
        as PLAN's ranks would have written it at the same step (a file per
        rank, each written atomically): dtc run PLAN --checkpoint OUT
        --resume then starts with no conversion. DIR is left as it was.

  import MODEL.onnx [-o OUT.mlir] [--shape NAME=DIMS]... [--freeze NAME=FILE.pb]...
        Import an ONNX model into dtc's graph dialect and print it as MLIR.
        --shape NAME=DIMS binds a graph input's shape (input_ids=2x128) or a
        symbolic dim (batch=2); repeat it as needed.
        --freeze NAME=FILE.pb makes graph input NAME a constant with the
        value in an ONNX TensorProto file (for shapes fed as inputs).
        --trainable PATTERN / --frozen PATTERN: weights (float initializers)
        training updates or leaves alone, by name (globs: * ? [..] {a,b});
        repeat as needed. By default a weight used as one (by a matmul,
        convolution, norm or embedding lookup) trains, and so does any
        other initializer except masks (values 0 and 1, or 0 and a large
        negative) and sin/cos tables; a frozen one is printed with why.
        --debug-locations prints each op's ONNX node name.
        --list-ops prints the supported ONNX op types; --list-opsets prints
        the supported default-domain opset range.

  dtc --help | --version
)";


/// The usage's sections for `command` (run has two: inference and
/// training), each from its "  command ..." line (as "usage: dtc
/// command ...") to the next command's; "" when it has none.
std::string commandUsage(const std::string &command) {
  std::string text = kUsage, out;
  bool inside = false;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    // A section starts at two spaces and a lowercase word (the command).
    bool header = line.size() > 2 && line.compare(0, 2, "  ") == 0 && line[2] >= 'a' &&
                  line[2] <= 'z';
    if (header)
      inside = line.compare(2, command.size() + 1, command + " ") == 0;
    if (inside && header)
      out += std::string(out.empty() ? "" : "\n") + "usage: dtc " + line.substr(2) + "\n";
    else if (inside)
      out += line + "\n";
  }
  return out;
}

} // namespace

} // namespace dtc::cli

int main(int argc, char **argv) {
  using namespace dtc::cli;
  Args args(argv + 1, argv + argc);
  if (args.empty())
    return usageError("no command given");
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "--help" || command == "-h" || command == "help") {
    llvm::outs() << kUsage;
    return 0;
  }
  if (command == "--version") {
    llvm::outs() << "dtc " << dtc::kDtcVersion << " (LLVM/MLIR " << LLVM_VERSION_STRING << ")\n";
    return 0;
  }
  // COMMAND --help (anywhere among its options): that command's usage.
  if (std::string usage = commandUsage(command); !usage.empty()) {
    setHelpCommand("dtc " + command + " --help");
    for (const std::string &arg : args)
      if (arg == "--help" || arg == "-h") {
        llvm::outs() << usage;
        return 0;
      }
  }
  if (command == "import")
    return runImport(args);
  if (command == "compile")
    return runCompile(args);
  if (command == "plan")
    return runPlan(args);
  if (command == "run")
    return runRun(args);
  if (command == "simulate")
    return runSimulate(args);
  if (command == "calibrate")
    return runCalibrate(args);
  if (command == "report")
    return runReport(args);
  if (command == "checkpoint")
    return runCheckpoint(args);
  return usageError("unknown command '" + command + "'");
}
