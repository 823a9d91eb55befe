"""A stand-in for tensorkiln.tune.worker speaking its protocol, for the measurement tests.

It crashes on a candidate with mr == 4, hangs on one with mr == 6, answers a
wrong result for mr == 10, and otherwise reports a time that falls as kc grows.
"""
import json
import os
import sys
import time

for line in sys.stdin:
    request = json.loads(line)
    config = request["config"] or {}
    if config.get("mr") == 4:
        os.abort()
    if config.get("mr") == 6:
        time.sleep(3600)
    if config.get("mr") == 10:
        reply = {"ok": False, "error": "wrong result: largest error 3 > tolerance 0.001"}
    else:
        ratio = 1.0 if not config else 1.0 - config["kc"] / 4096
        reply = {"ok": True, "seconds": 0.01 * ratio, "default_seconds": 0.01, "ratio": ratio,
                 "compile_seconds": 0.0}
    print(json.dumps(reply), flush=True)
