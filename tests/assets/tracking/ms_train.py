"""A tiny MindSpore job on CPU for the tracking tests: linear regression with Model.train and
the tracking MetricsCallback. Under the ms-cluster backend (MS_ROLE set) it joins the cluster
with init() first - the scheduler process runs this same file and returns from init() at the end."""
import os
import sys

from ms_regression import rank_shard, regression_model

if os.environ.get("MS_ROLE"):
    from mindspore.communication import init
    init()
    if os.environ["MS_ROLE"] == "MS_SCHED":
        sys.exit(0)

from platform_plugin.tracking.integrations.mindspore import MetricsCallback  # noqa: E402

EPOCHS = 2
rank = int(os.environ.get("RANK_ID", "0"))
model = regression_model(learning_rate=0.05)
model.train(EPOCHS, rank_shard(rank), callbacks=[MetricsCallback()], dataset_sink_mode=False)
print(f"rank {rank} trained", flush=True)
