import subprocess,re,sys,collections
side=sys.argv[1]; mode=sys.argv[2] if len(sys.argv)>2 else 'sym'
ans={}
for line in open('/work/notes/xp2/perf-answers'):
    m=re.match(r'/tmp/pf-(\d+)-(\w+) "answered": (\d+)',line)
    if m: ans[(m.group(1),m.group(2))]=int(m.group(3))*15/20
def load(r,t):
    out=subprocess.run(['perf','report','-i',f'/tmp/pf-{r}-{t}-{side}.data','--sort','sym','--stdio','-F','sample,sym'],capture_output=True,text=True).stdout
    d=collections.Counter()
    for line in out.splitlines():
        m=re.match(r'\s*(\d+)\s+\[(.)\]\s+(.*)',line)
        if m:
            s=m.group(3).strip()
            if mode=='pkg':
                if m.group(2)=='k': s='[kernel]'
                else:
                    s=re.sub(r'\.abi0$','',s)
                    m2=re.match(r'((?:[\w.-]+/)*[\w-]+)\.',s)
                    s=m2.group(1) if m2 else s
            d[s]+=int(m.group(1))
    return d
tot={'main0':collections.Counter(),'head':collections.Counter()}; A={'main0':0,'head':0}
for (r,t),a in ans.items():
    tot[t].update(load(r,t)); A[t]+=a
# samples at 2 kHz -> 500 us each; ns per answer
per={t:{k:v*500000/A[t] for k,v in tot[t].items()} for t in tot}
print('total ns/answer main0 %.0f head %.0f'%(sum(per['main0'].values()),sum(per['head'].values())))
keys=set(per['main0'])|set(per['head'])
rows=sorted(((per['head'].get(k,0)-per['main0'].get(k,0),per['main0'].get(k,0),per['head'].get(k,0),k) for k in keys),reverse=True)
n=int(sys.argv[3]) if len(sys.argv)>3 else 25
for r in rows[:n]: print('%+7.1f  main0 %7.1f head %7.1f  %s'%r)
print('...')
for r in rows[-12:]: print('%+7.1f  main0 %7.1f head %7.1f  %s'%r)
