#!/usr/bin/env python3
"""Usage: acp_tap.py LOG COMMAND... : runs COMMAND, passing stdio through, and appends every
line each way to LOG ("C> " from the client, "A> " from the agent). For reading ACP traffic."""
import os, sys, subprocess, threading
log = open(sys.argv[1], 'a', buffering=1)
p = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def up():
    try:
        for line in sys.stdin.buffer:
            log.write('C> ' + line.decode(errors='replace'))
            p.stdin.write(line); p.stdin.flush()
        p.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass
threading.Thread(target=up, daemon=True).start()
for line in p.stdout:
    log.write('A> ' + line.decode(errors='replace'))
    sys.stdout.buffer.write(line); sys.stdout.buffer.flush()
log.write('-- agent exited %s\n' % p.wait())
log.flush()
os._exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)
