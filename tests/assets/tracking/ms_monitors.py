"""A tiny MindSpore job on CPU that knows nothing of the platform: linear regression with
MindSpore's own LossMonitor and TimeMonitor, as a model-zoo script has them. `MS_DIVERGE=<rank>`
makes that rank's learning rate too large (its loss grows), `MS_WITH_CALLBACK=1` adds the
platform's MetricsCallback (the rank then logs `loss` itself)."""
import os

from mindspore.train import LossMonitor, TimeMonitor

from ms_regression import rank_shard, regression_model

EPOCHS = int(os.environ.get("MS_EPOCHS", "2"))
rank = int(os.environ.get("RANK_ID", "0"))
diverging = os.environ.get("MS_DIVERGE") == str(rank)
model = regression_model(learning_rate=1.2 if diverging else 0.05)
callbacks = [LossMonitor(), TimeMonitor()]
if os.environ.get("MS_WITH_CALLBACK") == "1":
    from platform_plugin.tracking.integrations.mindspore import MetricsCallback
    callbacks.append(MetricsCallback())
model.train(EPOCHS, rank_shard(rank), callbacks=callbacks, dataset_sink_mode=False)
print(f"rank {rank} trained", flush=True)
