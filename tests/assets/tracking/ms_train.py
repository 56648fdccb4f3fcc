"""A tiny MindSpore job on CPU for the tracking tests: linear regression with Model.train and
the tracking MetricsCallback. Under the ms-cluster backend (MS_ROLE set) it joins the cluster
with init() first - the scheduler process runs this same file and returns from init() at the end."""
import os
import sys

import numpy as np
import mindspore as ms
from mindspore import dataset as ds, nn

if os.environ.get("MS_ROLE"):
    from mindspore.communication import init
    init()
    if os.environ["MS_ROLE"] == "MS_SCHED":
        sys.exit(0)

from platform_plugin.tracking.integrations.mindspore import MetricsCallback  # noqa: E402

EPOCHS, BATCHES, BATCH = 2, 8, 16
rank = int(os.environ.get("RANK_ID", "0"))
rng = np.random.default_rng(rank)
x = rng.normal(size=(BATCHES * BATCH, 4)).astype(np.float32)
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.1).astype(np.float32)
data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
net = nn.Dense(4, 1)
model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=0.05))
model.train(EPOCHS, data, callbacks=[MetricsCallback()], dataset_sink_mode=False)
print(f"rank {rank} trained", flush=True)
