"""A 2-rank MindSpore data-parallel job that checkpoints every epoch and resumes.

FAIL_RANK / FAIL_EPOCH: that rank exits at the end of that epoch, on attempt 1 only (what a
device fault does to one rank). EPOCHS (default 6). Each worker writes
out/attempt<A>_rank<R>.json: the epoch it started after, the checkpoint it resumed from,
the epochs it ran and a digest of its final parameters. SAMPLES (default 64) per rank sets
an epoch's length: 8 per step.
"""
import hashlib
import json
import os

import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback, Model

from platform_plugin.checkpoint.mindspore import CheckpointCallback, resume_point, restore

ms.set_context(mode=ms.PYNATIVE_MODE)
init()  # the scheduler (MS_ROLE=MS_SCHED) runs the cluster inside init() and exits with it
rank, size = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                             device_num=size)
attempt = int(os.environ["PLATFORM_ATTEMPT_NUMBER"])
epochs = int(os.environ.get("EPOCHS", "6"))


class FailOnce(Callback):
    def __init__(self):
        super().__init__()
        self.ran = []

    def on_train_epoch_end(self, run_context):
        epoch = run_context.original_args().cur_epoch_num
        self.ran.append(epoch)
        print("rank %d attempt %d finished epoch %d" % (rank, attempt, epoch), flush=True)
        if attempt == 1 and str(rank) == os.environ.get("FAIL_RANK") \
                and str(epoch) == os.environ.get("FAIL_EPOCH"):
            os._exit(3)


ms.set_seed(0)
features = np.random.default_rng(rank).normal(size=(int(os.environ.get("SAMPLES", "64")), 8))
features = features.astype(np.float32)
labels = (features.sum(axis=1) > 0).astype(np.int32)
import mindspore.dataset as ds  # noqa: E402

data = ds.NumpySlicesDataset((features, labels), column_names=["x", "y"], shuffle=False).batch(8)
net = nn.SequentialCell(nn.Dense(8, 16), nn.ReLU(), nn.Dense(16, 2))
optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=optimizer)
point = resume_point()
initial_epoch = restore(net, optimizer)
print("rank %d attempt %d starts after epoch %d" % (rank, attempt, initial_epoch), flush=True)
fail = FailOnce()
model.train(epochs, data, callbacks=[CheckpointCallback(), fail], dataset_sink_mode=False,
            initial_epoch=initial_epoch)
digest = hashlib.sha256()
for param in net.trainable_params():
    digest.update(param.name.encode() + param.asnumpy().tobytes())
os.makedirs("out", exist_ok=True)
with open("out/attempt%d_rank%d.json" % (attempt, rank), "w") as fh:
    json.dump({"rank": rank, "size": size, "attempt": attempt, "initial_epoch": initial_epoch,
               "resumed_from": point.file if point else None, "ran": fail.ran,
               "params": digest.hexdigest()}, fh)
