"""2+ rank MindSpore CPU job (backend mccl): AllReduce, then two data-parallel SGD steps.

Prints one JSON line `RESULT {...}` per worker so the test can compare ranks."""
import json
import os

import numpy as np
import mindspore as ms
from mindspore import nn, ops
from mindspore.communication import get_group_size, get_rank, init

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
init()  # the scheduler (MS_ROLE=MS_SCHED) runs the cluster inside init() and exits with it
rank, size = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)

summed = ops.AllReduce()(ms.Tensor(np.array([rank + 1.0], np.float32))).asnumpy().tolist()

ms.set_seed(0)
np.random.seed(0)
net = nn.Dense(4, 1)
optimizer = nn.SGD(net.trainable_params(), learning_rate=0.1)
loss_fn = nn.MSELoss()


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
reducer = nn.DistributedGradReducer(optimizer.parameters)
rng = np.random.default_rng(rank)  # each rank its own shard of data
losses = []
for step in range(2):
    x = ms.Tensor(rng.normal(size=(8, 4)).astype(np.float32))
    y = ms.Tensor(rng.normal(size=(8, 1)).astype(np.float32))
    loss, grads = grad_fn(x, y)
    optimizer(reducer(grads))
    losses.append(float(loss.asnumpy()))
weights = [p.asnumpy().ravel().tolist() for p in net.trainable_params()]
print("RESULT " + json.dumps({"rank": rank, "size": size, "env_rank": os.environ["RANK_ID"],
                              "allreduce": summed, "weights": weights, "losses": losses}))
