"""The tiny MindSpore job the tracking assets share (ms_train.py, ms_monitors.py): a linear
regression on CPU, each rank on its own synthetic shard (seeded by its rank), 8 batches of 16.
Python 3.7 code (the 3.7 ranks of tests/compat/test_py37.py run ms_train.py). A script run as
`python ms_train.py` imports it from its own folder: a test that copies a script copies this
module too (tests/helpers.py, copy_tracking_asset)."""
import numpy as np
import mindspore as ms
from mindspore import dataset as ds, nn

BATCHES, BATCH = 8, 16


def rank_shard(rank):
    """The rank's data set: y = x . w + 0.1 over 128 points drawn with the rank as seed."""
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(BATCHES * BATCH, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.1).astype(np.float32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


def regression_model(learning_rate):
    """A 4 -> 1 dense net with MSE and plain SGD."""
    net = nn.Dense(4, 1)
    return ms.Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=learning_rate))
