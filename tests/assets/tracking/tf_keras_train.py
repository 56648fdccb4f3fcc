"""A tiny tf.keras fit on CPU (TensorFlow 1.15, Python 3.7) for the tracking tests, logged with
tracking.integrations.tensorflow.MetricsCallback."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from platform_plugin.tracking.integrations.tensorflow import MetricsCallback  # noqa: E402

EPOCHS, SAMPLES, BATCH = 2, 64, 16
rank = int(os.environ.get("RANK_ID", "0"))
rng = np.random.RandomState(rank)
x = rng.normal(size=(SAMPLES, 4)).astype(np.float32)
y = (x.sum(axis=1, keepdims=True) > 0).astype(np.float32)
model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="sigmoid", input_shape=(4,))])
model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss="binary_crossentropy",
              metrics=["accuracy"])
model.fit(x, y, epochs=EPOCHS, batch_size=BATCH, validation_data=(x[:16], y[:16]), verbose=0,
          shuffle=False, callbacks=[MetricsCallback()])
print("rank {} fitted".format(rank), flush=True)
