"""The terms the article explains, and the ones tpulab adds, for help in place."""

GLOSSARY: dict[str, str] = {
    "batch": "The examples processed together in one step (one gradient update when training). The global "
             "batch is split evenly across shards: each replica gets global / shards examples.",
    "epoch": "One pass of steps-per-epoch training steps; validation runs after each.",
    "learning rate": "How far each update moves the weights. Too large and the loss jumps about; too small "
                     "and learning crawls.",
    "optimizer": "The rule that turns gradients into weight updates. The article uses Adam.",
    "loss": "One number saying how wrong the model is on a batch; training lowers it. Here sparse categorical "
            "cross-entropy: integer labels against 10 output probabilities (which is why one label column "
            "and 10 outputs is no error).",
    "convolution": "A layer that slides small kernels (filters) over an image, each producing one output "
                   "channel; its cost is 2 x outputs x kernel height x kernel width x input channels FLOPs.",
    "pooling": "Downsampling: max pooling keeps the largest value of each 2x2 block, shrinking the image and "
               "the work of later layers.",
    "activation": "A non-linear function applied to a layer's outputs, such as ELU or softmax.",
    "ELU": "Exponential linear unit: x for x > 0, exp(x) - 1 otherwise; like ReLU, with mean activations "
           "closer to zero.",
    "dropout": "During training, a random share of activations (0.25, 0.5) is zeroed, against overfitting.",
    "normalisation": "Batch normalisation rescales each channel to zero mean and unit variance over the batch.",
    "weights": "The numbers a model learns. The article's CNN has 1,619,470 of them.",
    "hyperparameter": "A setting chosen before training (batch size, learning rate, epochs), not learned.",
    "tensor": "An n-dimensional array: a batch of images is a 4-D tensor (batch, height, width, channels).",
    "stride": "The step between kernel positions: stride 2 halves the output's height and width.",
    "padding": "SAME pads the border so the output has ceil(size / stride) positions; VALID uses only "
               "positions where the kernel fits.",
    "precision": "The number format. float32 is exact enough for anything here; bfloat16 and float16 halve "
                 "memory traffic and run on tensor cores/MXUs; mixed precision keeps float32 weights.",
    "shard": "One replica of the computation on its own device (a TPU core, a GPU, or a logical CPU device), "
             "each working on its slice of the batch.",
    "mode": "sharded: a compiled step per replica, its output reduced on the device and fetched, so only "
            "completed work is timed. naive: the article's first attempt, eager ops fed from the host and their "
            "whole output copied back (with shards, one device after another). batch-parallel: the article's "
            "TPU call, fixed so each shard's output is consumed.",
    "warm-up": "Iterations after the first call that are run but left out of the statistics, so caches, "
               "allocators and clocks settle.",
    "backend": "The framework that runs the work. TensorFlow is the article's; Keras 3 on JAX runs the same model "
               "and is what today's TPUs (Colab's v5e) ship with. The same run on both, on one device, compares "
               "the frameworks themselves.",
    "multi-host": "One run over several processes, each driving its own devices, joined by JAX's distributed "
                  "runtime: a TPU pod slice is several hosts. tpulab can start N processes on this machine "
                  "(--processes N) to run the very same path; the record shows each host's step time and names "
                  "the slowest (the straggler).",
    "XLA": "The compiler TensorFlow can use and JAX always uses: fuses operations into fewer, faster kernels; the "
           "first step pays for the compile. On a CPU, TensorFlow's default oneDNN kernels are often faster.",
    "input pipeline": "How batches reach the model. tf.data prepares the next batch while the device works; "
                      "the article's Python generator makes each batch in Python, in the way.",
    "validation": "Measuring accuracy on data the model did not train on (the 10,000 test images).",
    "steps per execution": "Training steps run per call from Python into the device. Above 1 it hides "
                           "dispatch latency (large on TPUs); timings are still reported per step.",
    "peak": "The most FLOP/s the device can do. A result above it means work was skipped or mis-counted.",
    "roofline": "A device's two measured ceilings: the best FLOP/s of a large matrix product (per dtype) and the "
                "bytes per second of a copy much larger than the cache. A kernel can go no faster than the lower "
                "of FLOP/s and bandwidth x its arithmetic intensity. Spec peaks are rarely reached (matmuls get "
                "about 80-90% of them); the measured ceiling says what this machine actually does. Run "
                "`tpulab --run roofline` once per device: later runs show their share of it.",
    "arithmetic intensity": "FLOPs per byte of memory traffic (XLA's cost analysis counts the bytes). Below the "
                            "ridge (compute ceiling / bandwidth) a step is memory-bound: faster math would not "
                            "help, moving fewer bytes would. Above it, it is compute-bound.",
    "profile": "Where a step's time goes, op by op (--profile): after the timed steps, a few more are traced by "
               "the framework's profiler, never timed. Each op's time and share of the step, set against the "
               "device's ceilings where its FLOPs and bytes are known, and the host gap: the part of the step in "
               "which no op ran, the device waiting on the host (input pipeline, dispatch, Python).",
    "ceiling": "The measured ceiling: the best a roofline run achieved on this device and dtype, as opposed to "
               "the spec peak, kept once its matmul curve was flat (the two largest sizes within 10%). A run "
               "above it beats the ceiling (said so, never shown as more than 100%).",
    "MFU": "Model FLOPs utilisation: the model's FLOPs per step by its standard formula, over the step time, as a "
           "fraction (0-1) of the device's peak for the compute dtype. For a transformer, 6 x N x tokens (N the "
           "parameters it multiplies by: all but the embedding tables) plus the attention term 12 x layers x "
           "width x sequence length x tokens (PaLM's formula); for ResNet-50, 3 x its forward pass counted layer "
           "by layer. Work the hardware redoes (rematerialisation) is not counted, so MFU <= the fraction of peak.",
    "tokens/s": "A language model's throughput: sequences per second x tokens per sequence. Training's counts "
                "every token of every sequence of the batch.",
    "prefill": "The forward pass over a whole prompt, all tokens at once, that precedes generation: here "
               "`predict` over full sequences, in tokens/s. Generating token by token (decoding) is not timed.",
    "inference": "Running a trained model forward only (Keras `predict`), after training, on batches of the same "
                 "size: timed by the same step timer, its first call (a compile of its own) reported apart, and "
                 "kept apart from training's figures.",
    "images/s": "An image model's throughput: images per second, the figure tf_cnn_benchmarks and MLPerf quote.",
    "your model": "tpulab --run model --model FILE.py:FUNCTION (or module:function): the function returns a "
                  "compiled Keras 3 model, or (model, (x, y)) with its data. tpulab sets the batch size, steps, "
                  "shards, precision policy (before the model is built) and backend; the optimizer, loss and "
                  "metrics are yours. Its FLOPs come from XLA's cost analysis on JAX; elsewhere they are unknown. "
                  "The record keeps the file, function, a hash of the file and the parameter count.",
}
