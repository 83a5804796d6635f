#!/usr/bin/env python3
# Usage: python3 benches/store_cpu.py target/release/toolsched-bench "$(cat .services/postgres.url)" [path/to/toolsched]
"""Runs `toolsched-bench --scenarios store` and samples the CPU (utime+stime) of
PostgreSQL's processes and of the `--store postgres` toolsched server every
100 ms. Prints, for the S1 read phase on the PostgreSQL server (the 4 s after
its progress line), CPU per batch of each, from the bench's RPC/s."""
import os, re, subprocess, sys, threading, time
bench, url = sys.argv[1], sys.argv[2]
server = sys.argv[3] if len(sys.argv) > 3 else None
tick = os.sysconf('SC_CLK_TCK')
def cpu(pid):
    try:
        f = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick
    except Exception:
        return None
known = {}
def scan():
    found = {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try:
            cmd = open(f'/proc/{p}/cmdline','rb').read().split(b'\0')
        except Exception: continue
        exe = os.path.basename(cmd[0].decode(errors='replace'))
        if exe.startswith('postgres'):
            found[p] = 'pg'
        elif exe == 'toolsched' and any(a.startswith(b'postgres://') for a in cmd):
            found[p] = 'ts'
        elif exe == 'toolsched':
            found[p] = 'mem'
    return found
last_cpu = {}
def procs():
    # Exited processes keep their last reading (PostgreSQL backends of a
    # dropped pool).
    pg, ts, mem = 0.0, 0.0, 0.0
    for p, kind in known.items():
        c = cpu(p)
        if c is not None: last_cpu[p] = c
        c = last_cpu.get(p, 0.0)
        if kind == 'pg': pg += c
        elif kind == 'ts': ts += c
        else: mem += c
    return pg, ts, mem
samples, marks = [], []
stop = False
def sampler():
    n = 0
    while not stop:
        if n % 10 == 0: known.update(scan())
        n += 1
        samples.append((time.time(),) + procs()); time.sleep(0.1)
threading.Thread(target=sampler, daemon=True).start()
args = [bench, '--scenarios', 'store', '--runs', '1', '--store', url]
if server: args += ['--server', server]
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
def err():
    # Progress is one line redrawn (no newline): read it as it comes.
    buf = ''
    while True:
        ch = p.stderr.read(1)
        if not ch: return
        buf += ch
        if buf.endswith('postgres') or buf.endswith('memory'):
            marks.append((time.time(), buf[-40:]))
threading.Thread(target=err, daemon=True).start()
out = p.stdout.read(); p.wait(); stop = True
print(out)
t0 = next(t for t, l in marks if l.endswith('postgres'))
m0 = next(t for t, l in marks if l.endswith('memory'))
def at(t):
    return min(samples, key=lambda s: abs(s[0]-t))
a, b = at(t0 + 0.5), at(t0 + 3.5)
rps = float(re.search(r'1 read_file per batch.*?\| (\d+) ', out).group(1))
n = rps * (b[0]-a[0])
print(f'S1 read on postgres: {rps:.0f} RPC/s; per batch: PostgreSQL {1e6*(b[1]-a[1])/n:.0f} us CPU, server {1e6*(b[2]-a[2])/n:.0f} us CPU')

ma, mb = at(m0 + 0.5), at(m0 + 3.5)
mrps = float(re.search(r'1 read_file per batch.*?\| \d+ .*?\| (\d+) ', out).group(1))
print(f'S1 read on memory: {mrps:.0f} RPC/s; per batch: server {1e6*(mb[3]-ma[3])/(mrps*(mb[0]-ma[0])):.0f} us CPU')
