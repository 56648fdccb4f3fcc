"""A tiny MindSpore job on CPU that knows nothing of the platform: linear regression with
MindSpore's own LossMonitor and TimeMonitor, as a model-zoo script has them. `MS_DIVERGE=<rank>`
makes that rank's learning rate too large (its loss grows), `MS_WITH_CALLBACK=1` adds the
platform's MetricsCallback (the rank then logs `loss` itself)."""
import os

import numpy as np
import mindspore as ms
from mindspore import dataset as ds, nn
from mindspore.train import LossMonitor, TimeMonitor

EPOCHS, BATCHES, BATCH = int(os.environ.get("MS_EPOCHS", "2")), 8, 16
rank = int(os.environ.get("RANK_ID", "0"))
rng = np.random.default_rng(rank)
x = rng.normal(size=(BATCHES * BATCH, 4)).astype(np.float32)
y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.1).astype(np.float32)
data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)
net = nn.Dense(4, 1)
diverging = os.environ.get("MS_DIVERGE") == str(rank)
model = ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(),
                                            learning_rate=1.2 if diverging else 0.05))
callbacks = [LossMonitor(), TimeMonitor()]
if os.environ.get("MS_WITH_CALLBACK") == "1":
    from platform_plugin.tracking.integrations.mindspore import MetricsCallback
    callbacks.append(MetricsCallback())
model.train(EPOCHS, data, callbacks=callbacks, dataset_sink_mode=False)
print(f"rank {rank} trained", flush=True)
