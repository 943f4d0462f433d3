import subprocess,sys,re,collections
def load(bin,profs,ops,cum=False):
    out=subprocess.run(['go','tool','pprof','-top','-nodecount=100000']+(['-cum'] if cum else [])+[bin]+profs,capture_output=True,text=True).stdout
    d={}
    for line in out.splitlines():
        m=re.match(r'\s*([\d.]+)(s|ms|us)\s+[\d.]+%\s+[\d.]+%\s+([\d.]+)(s|ms|us)\s+[\d.]+%\s+(.*)',line)
        if m:
            u={'s':1e9,'ms':1e6,'us':1e3}
            flat=float(m.group(1))*u[m.group(2)]; c=float(m.group(3))*u[m.group(4)]
            d[m.group(5).strip()]=(flat/ops,c/ops)
    return d
a=load(sys.argv[1],sys.argv[2].split(','),float(sys.argv[3]))
b=load(sys.argv[4],sys.argv[5].split(','),float(sys.argv[6]))
col=int(sys.argv[7]) if len(sys.argv)>7 else 0
n=int(sys.argv[8]) if len(sys.argv)>8 else 40
print('total flat ns/op a %.0f b %.0f'%(sum(v[0] for v in a.values()),sum(v[0] for v in b.values())))
rows=sorted(((b.get(k,(0,0))[col]-a.get(k,(0,0))[col],a.get(k,(0,0))[col],b.get(k,(0,0))[col],k) for k in set(a)|set(b)),reverse=True)
for r in rows[:n]: print('%+7.1f a %7.1f b %7.1f %s'%r)
print('...')
for r in rows[-n//2:]: print('%+7.1f a %7.1f b %7.1f %s'%r)
