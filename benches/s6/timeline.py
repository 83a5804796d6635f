# Phases of each S6 call from a timeline.sh recording: p50/p25/p75/mean in µs.
# The server is the process whose tokio threads send to the zygote; the
# client is toolsched-bench; a call is anchored on its bash exec.
import sys, re, subprocess, statistics as st
data = sys.argv[1]
out = subprocess.run(['perf','script','-i',data,'-F','comm,pid,tid,time,event,trace'],capture_output=True,text=True).stdout
ev=[]
rx = re.compile(r'^\s*(.+?)\s+(\d+)/(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)$')
for line in out.splitlines():
    m = rx.match(line)
    if not m: continue
    comm,pid,tid,t,e,rest = m.groups()
    ev.append((float(t)*1e6, comm, int(pid), int(tid), e.replace('syscalls:','').replace('sched:',''), rest))
ev.sort()
import os
if os.path.exists(data + '.bench'):
    bench = {int(open(data + '.bench').read())}
else:
    bench = {p for (_,c,p,_,_,_) in ev if c=='toolsched-bench'}
from collections import Counter
cnt = Counter(p for (_,c,p,_,e,_) in ev if c=='tokio-rt-worker' and p not in bench and e=='sys_enter_sendmsg')
server = cnt.most_common(1)[0][0]
# bench threads: tokio-rt-worker threads whose pid is bench
def is_bench(p): return p in bench
def is_server(p): return p==server
execs=[i for i,x in enumerate(ev) if x[4]=='sched_process_exec' and 'bash' in x[5]]
ph={k:[] for k in ['c_send->s_recv','s_recv->s_zyg','s_zyg->z_sendmsg','z_sendmsg->exec','exec->exit','exit->s_writev','s_writev->c_recv','c_recv->c_send(next)','cycle']}
def prev(i, pred):
    j=i
    while j>0:
        j-=1
        if pred(ev[j]): return j
    return None
def nxt(i,pred):
    j=i
    while j<len(ev)-1:
        j+=1
        if pred(ev[j]): return j
    return None
prev_exec=None
for i in execs:
    bpid_exec = int(re.search(r'pid=(\d+)',ev[i][5]).group(1))
    zs = prev(i, lambda x: x[4]=='sys_enter_sendmsg' and x[1]=='toolsched' and not is_server(x[2]))
    ss = prev(i, lambda x: x[4]=='sys_enter_sendmsg' and is_server(x[2]))
    sr = prev(ss, lambda x: x[4]=='sys_exit_recvfrom' and is_server(x[2]) and not x[5].startswith('0xfff')) if ss else None
    cs = prev(sr, lambda x: x[4]=='sys_enter_writev' and is_bench(x[2])) if sr else None
    ex = nxt(i, lambda x: x[4]=='sched_process_exit' and ('pid=%d '%bpid_exec) in x[5])
    if None in (zs,ss,sr,cs,ex): continue
    sw = nxt(ex, lambda x: x[4]=='sys_enter_writev' and is_server(x[2]))
    if sw is None: continue
    cr = nxt(sw, lambda x: x[4]=='sys_exit_recvfrom' and is_bench(x[2]) and not x[5].startswith('0xfff'))
    if cr is None: continue
    cn = nxt(cr, lambda x: x[4]=='sys_enter_writev' and is_bench(x[2]))
    if cn is None: continue
    T=lambda k: ev[k][0]
    vals=[T(sr)-T(cs),T(ss)-T(sr),T(zs)-T(ss),T(i)-T(zs),T(ex)-T(i),T(sw)-T(ex),T(cr)-T(sw),T(cn)-T(cr),T(cn)-T(cs)]
    for k,v in zip(ph,vals): ph[k].append(v)
n=len(ph['cycle'])
if n == 0:
    sys.exit('no whole call found in the recording')
print('server',server,'bench',bench,'cycles',n)
for k,v in ph.items():
    v=sorted(v); print(f'{k:22s} p50 {v[len(v)//2]:8.1f}  p25 {v[len(v)//4]:8.1f} p75 {v[3*len(v)//4]:8.1f} mean {st.mean(v):8.1f}')
