"""Stand-in for an HCCL rank: there is no NPU or HCCL on the test machine, so this checks the
environment the way HCCL initialisation would and exits non-zero when it would fail:
RANK_TABLE_FILE readable, RANK_ID in the table, DEVICE_ID = the PHYSICAL device_id of that rank
on this server (not its list index), RANK_SIZE = all devices of the table, and the compile
cache / Ascend process logs outside the working directory (CODE/). It reads the JSON itself,
independently of platform_plugin.ranktable."""
import json
import os
import sys
import time

env = os.environ
with open(env["RANK_TABLE_FILE"], encoding="utf-8") as fh:
    table = json.load(fh)
rank_id, device_id, rank_size = int(env["RANK_ID"]), int(env["DEVICE_ID"]), int(env["RANK_SIZE"])
entries = [(s["server_id"], int(d["device_id"]), int(d["rank_id"]))
           for s in table["server_list"] for d in s["device"]]
mine = [e for e in entries if e[2] == rank_id]
problems = []
if len(mine) != 1:
    problems.append(f"rank {rank_id} not exactly once in the table")
elif mine[0][1] != device_id:
    problems.append(f"DEVICE_ID {device_id} but rank {rank_id} is device {mine[0][1]}")
elif mine[0][0] != env["PLATFORM_SERVER_ID"]:
    problems.append(f"rank {rank_id} belongs to server {mine[0][0]}")
if rank_size != len(entries):
    problems.append(f"RANK_SIZE {rank_size} but the table has {len(entries)} devices")
cwd = os.path.realpath(os.getcwd())
for name in ("MS_COMPILER_CACHE_PATH", "ASCEND_PROCESS_LOG_PATH"):
    if os.path.realpath(env[name]).startswith(cwd + os.sep):
        problems.append(f"{name} is inside the working directory")
if problems:
    sys.exit("HCCL stand-in: " + "; ".join(problems))
print(f"HCCL-OK rank {rank_id} device {device_id} size {rank_size}", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
