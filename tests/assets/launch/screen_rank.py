"""A rank that draws like a terminal program: colours, a 5 MB line without a newline, a `\\r`
progress bar redrawn for ~2.5 s (longer than the display's partial-line flush), then a last line.
"""
import sys
import time

out = sys.stdout
out.write("\x1b[31mred error\x1b[0m \x1b[1;32mbold green\x1b[0m plain\n")
out.write("x" * 5_000_000)
out.write("\n")
out.flush()
for step in range(26):
    out.write(f"\rtraining: {step * 4}%|{'#' * step}")
    out.flush()
    time.sleep(0.1)
out.write("\n")
print("rank done", flush=True)
