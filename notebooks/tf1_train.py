"""TensorFlow 1.15 ranks: each rank trains a small logistic regression on its own shard of a
synthetic data set (no data parallel: no gradient exchange), with a graph, a
`MonitoredTrainingSession` and platform_plugin's `MetricsHook` logging its loss and steps/s.

    platform-run launch --nproc 2 -- /path/to/py37/bin/python tf1_train.py --steps 60

On Ascend the TF Adapter (`npu_bridge`) is used when it is installed: the session gets the
`NpuOptimizer` and the rank-table backend's variables (printed first, `ascend_env {...}`) say
which card and which job. Elsewhere it runs on CPU. Python 3.7 code (the images' interpreter).
"""
import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ INFO and WARNING lines

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf.rewriter_config_pb2 import RewriterConfig  # noqa: E402

try:
    import npu_bridge.npu_init  # noqa: F401  Ascend's TF Adapter: the NPU as TensorFlow's device
    ON_NPU = True
except ImportError:
    ON_NPU = False
try:
    from platform_plugin.tracking.integrations.tensorflow import MetricsHook
except ImportError:  # no platform_plugin for this interpreter: train without tracking
    MetricsHook = None

# What the TF Adapter reads (docs/ranktables-and-variables.md), printed so a log shows them.
ADAPTER_VARIABLES = ("RANK_TABLE_FILE", "RANK_ID", "RANK_SIZE", "ASCEND_DEVICE_ID", "DEVICE_ID",
                     "JOB_ID")
FEATURES = 8


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60, help="training steps of each rank")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--samples", type=int, default=2000, help="size of the whole data set")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def shard(samples, seed, rank, size):
    """The rank's rows of one data set every rank generates alike: labels of a fixed linear
    rule, so the loss can fall."""
    rng = np.random.RandomState(seed)
    x = rng.normal(size=(samples, FEATURES)).astype(np.float32)
    w = rng.normal(size=(FEATURES, 1)).astype(np.float32)
    y = (x.dot(w) > 0).astype(np.float32)
    return x[rank::size], y[rank::size]


def session_config():
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    if ON_NPU:  # the TF Adapter's session set-up (its migration guide)
        custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
        custom_op.name = "NpuOptimizer"
        config.graph_options.rewrite_options.remapping = RewriterConfig.OFF
        config.graph_options.rewrite_options.memory_optimization = RewriterConfig.OFF
    return config


def main(argv=None):
    args = parse_args(argv)
    rank, size = int(os.environ.get("RANK_ID", "0")), int(os.environ.get("RANK_SIZE", "1"))
    print("ascend_env " + json.dumps({k: os.environ.get(k) for k in ADAPTER_VARIABLES},
                                     sort_keys=True), flush=True)
    x, y = shard(args.samples, args.seed, rank, size)
    if len(x) < args.batch_size:
        sys.exit("{} samples leave rank {} {} rows, less than a batch of {}: raise --samples or "
                 "lower --batch-size".format(args.samples, rank, len(x), args.batch_size))
    tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.ERROR)
    tf.compat.v1.set_random_seed(args.seed)
    data = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=args.seed)
            .repeat().batch(args.batch_size, drop_remainder=True))
    features, labels = tf.compat.v1.data.make_one_shot_iterator(data).get_next()
    logits = tf.compat.v1.layers.dense(features, 1)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    global_step = tf.compat.v1.train.get_or_create_global_step()
    train_op = tf.compat.v1.train.GradientDescentOptimizer(args.lr).minimize(
        loss, global_step=global_step)

    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
    if MetricsHook is not None:
        hooks.append(MetricsHook(loss, batch_size=args.batch_size, params={
            "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr,
            "rank_rows": len(x)}))
    losses = []
    with tf.compat.v1.train.MonitoredTrainingSession(hooks=hooks, config=session_config(),
                                                     save_checkpoint_secs=None,
                                                     save_summaries_steps=None) as sess:
        while not sess.should_stop():
            _, value = sess.run([train_op, loss])
            losses.append(float(value))
    print("rank {}: {} steps, loss {:.4f} -> {:.4f}".format(rank, len(losses), losses[0],
                                                           losses[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
