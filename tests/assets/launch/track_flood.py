"""Logs a metric point and prints 8 KiB per 20 points, forever: fills a log disk while
spooling tracking records."""
import sys
from platform_plugin import tracking
t = tracking.get_tracker()
i = 0
line = b"x" * 1000 + b"\n"
while True:
    for _ in range(20):
        t.log_metric("loss", 1.0 / (i + 1), step=i)
        i += 1
    sys.stdout.buffer.write(line * 8); sys.stdout.buffer.flush()
