"""A MindSpore data-parallel job written as MindSpore's startup_method sample (net.py, run by
msrun or run_dynamic_cluster.sh) is: init(), a small network trained by Model.train with
LossMonitor on a synthetic dataset, each rank its own shard. It reads nothing of the launcher's
own; it prints `ENV {...}` with the cluster variables MindSpore read, so a test can see them."""
import json
import os

import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import LossMonitor, Model

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
init()  # the scheduler (MS_ROLE=MS_SCHED) runs the cluster inside init() and exits with it
rank, size = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
print("ENV " + json.dumps({name: os.environ.get(name) for name in (
    "MS_TOPO_TIMEOUT", "MS_NODE_TIMEOUT", "MS_WORKER_NUM", "OMP_NUM_THREADS", "RANK_ID")}),
    flush=True)


inputs = np.random.default_rng(7).normal(size=(64, 4)).astype(np.float32)
targets = inputs.sum(axis=1, keepdims=True)
data = ms.dataset.NumpySlicesDataset((inputs, targets), ["x", "y"], shuffle=False,
                                     num_shards=size, shard_id=rank).batch(8)
ms.set_seed(0)
net = nn.Dense(4, 1)
model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=0.05))
model.train(2, data, callbacks=[LossMonitor()], dataset_sink_mode=False)
